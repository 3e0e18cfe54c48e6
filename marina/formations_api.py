"""GET /api/formations: the formations' id templates (`marina/verify:<model>`,
...), described for people and scripts. /v1/models lists only ids a client can
call (an OpenAI client iterating it must not get a placeholder), so the
templates are described here and in docs/formations.md instead."""
from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router

from kernel import formations as registry
from marina.read_api import ERRORS, Reader
from marina.read_schemas import Formations
from passthru import formations

router = Router(tags=["read"], auth=Reader())

# What each template's <model> means, and what the formation does (kernel/formations.py, docs/formations.md).
_STACK_EXAMPLE = registry.stacked(registry.VERIFY.template, registry.OBLIGATIONS.name, registry.ARGCHECK.name)
_ABOUT = {entry.template: f"{entry.description}; <model> is {entry.model}" for entry in registry.ALL}


@router.get("/formations", response={200: Formations, **ERRORS}, summary="The formations' model-id templates")
def list_formations(request: HttpRequest) -> dict[str, Any]:
    templates = [
        {
            "template": template,
            "formation": formation.name,
            "prefix": template.split("<", 1)[0],
            "about": _ABOUT.get(template, ""),
            "example": template.replace("<model>", "openrouter/openai/gpt-5.2"),
        }
        for formation in formations.FORMATIONS
        for template in getattr(formation, "listed_ids", ())
    ]
    return {
        "templates": templates,
        "note": "replace <model> with a callable id (a <provider>/<model>, an alias, `default`); prefixes stack "
        f"({_STACK_EXAMPLE}). Crews are `{registry.CREW_PREFIX}<name>` and listed by /v1/models.",
    }
