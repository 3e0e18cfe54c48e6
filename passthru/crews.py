"""Crews: named endpoints served as `marina:<name>` (the Crew table, managed
in the admin).

A crew is not a formation of its own: it rewrites the request (its model id,
its extra system text, its reasoning effort default) and the request then
goes where that model id goes: the passthru, a formation or a stack, streamed
or not. The crew is read from the database on every request (one indexed
row, on the formation-state thread), so an edit or a disable in the admin
holds from the next request on, on every worker and host."""
from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kernel import formations as registry
from passthru.context import RequestContext
from passthru.errors import ApiError
from passthru.formations.conversation import SYSTEM_ROLES
from passthru.formations.state import run_on_state_thread
from passthru.providers import DEFAULT_IDS

PREFIX = registry.CREW_PREFIX
RESERVED_NAMES = frozenset(i[len(PREFIX) :] for i in DEFAULT_IDS if i.startswith(PREFIX))  # marina:default
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
# Fields by which a caller sets its own reasoning effort (the crew's default then stays out).
_EFFORT_FIELDS = ("reasoning_effort", "reasoning", "thinking")


@dataclass(frozen=True)
class CrewSpec:
    name: str
    model_id: str
    system_text: str
    reasoning_effort: str


def is_crew_id(model_id: str) -> bool:
    return model_id.startswith(PREFIX) and model_id not in DEFAULT_IDS


def _find(name: str) -> CrewSpec | None:
    from passthru.models import Crew

    row = Crew.objects.filter(name=name, enabled=True).values_list("name", "model_id", "system_text", "reasoning_effort").first()
    return CrewSpec(*row) if row else None


def _enabled_names() -> list[str]:
    from passthru.models import Crew

    return list(Crew.objects.filter(enabled=True).order_by("name").values_list("name", flat=True))


async def listed_ids() -> list[str]:
    """`marina:<name>` of every enabled crew, for /v1/models."""
    names: list[str] = await run_on_state_thread(_enabled_names)
    return [f"{PREFIX}{name}" for name in names]


def not_found(model_id: str) -> ApiError:
    return ApiError(
        404,
        f"The crew '{model_id}' does not exist or is disabled: see GET /v1/models for the crews served here.",
        code="model_not_found",
        param="model",
    )


async def apply(ctx: RequestContext, body: dict[str, Any]) -> dict[str, Any]:
    """The body as the crew's model id is asked for it; 404 model_not_found for
    an unknown or disabled crew. The crew is traced as a span (name, model id,
    the defaults it applied); its model id's own spans follow."""
    name = body["model"][len(PREFIX) :]
    started = time.perf_counter()
    spec: CrewSpec | None = await run_on_state_thread(_find, name) if name else None
    if spec is None:
        raise not_found(body["model"])
    if is_crew_id(spec.model_id):  # the admin refuses these; a row edited by hand could hold one
        raise ApiError(
            400,
            f"The crew '{body['model']}' serves another crew ('{spec.model_id}'): give it a model id, not a crew.",
            code="model_not_found",
            param="model",
        )
    applied: list[str] = []
    out = {**body, "model": spec.model_id}
    if spec.system_text:
        out["messages"] = with_system_text(body["messages"], spec.system_text)
        applied.append("system_text")
    if spec.reasoning_effort and not sets_effort(body):
        out["reasoning_effort"] = spec.reasoning_effort
        applied.append("reasoning_effort")
    span = ctx.open_span("crew")
    span.detail = {"crew": spec.name, "model_id": spec.model_id, "applied": applied}
    span.duration_ms = (time.perf_counter() - started) * 1000
    return out


def with_system_text(messages: list[Any], text: str) -> list[Any]:
    """A system message with `text` right after the caller's leading system
    (or developer) messages: what the caller sent stays byte for byte, in
    front, so a provider's prompt cache keeps working."""
    at = 0
    while at < len(messages) and isinstance(messages[at], Mapping) and messages[at].get("role") in SYSTEM_ROLES:
        at += 1
    return [*messages[:at], {"role": "system", "content": text}, *messages[at:]]


def sets_effort(body: Mapping[str, Any]) -> bool:
    extra = body.get("extra_body")
    sources = (body, extra if isinstance(extra, Mapping) else {})
    return any(source.get(name) is not None for source in sources for name in _EFFORT_FIELDS)
