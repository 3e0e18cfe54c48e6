"""GET /v1/models: the ids a client can use, in OpenAI's list shape."""
from __future__ import annotations

import asyncio
import time
from typing import Any

from django.conf import settings

from ledger.spend import selectors, services
from passthru import auth, formations


async def list_models(authorization: str | None) -> dict[str, Any]:
    await auth.authenticate(authorization)
    recent = await asyncio.wrap_future(services.submit(selectors.recent_models))
    now = int(time.time())
    ids: dict[str, str] = {}
    for alias in settings.MARINA_MODEL_ALIASES:
        ids.setdefault(alias, "marina")
    for formation in formations.REGISTRY:
        for example in getattr(formation, "listed_ids", ()):
            ids.setdefault(example, "marina")
    for model_id in recent:
        ids.setdefault(model_id, model_id.partition("/")[0] or "marina")
    return {
        "object": "list",
        "data": [{"id": i, "object": "model", "created": now, "owned_by": owner} for i, owner in ids.items()],
    }
