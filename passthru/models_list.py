"""GET /v1/models: the ids a client can use, in OpenAI's list shape.

Only ids a client can call: never a template with a placeholder
(`marina/verify:<model>`: GET /api/formations describes those). Listed before
their first use: the configured aliases, each formation's prefix on every alias
(and on `default` when MARINA_DEFAULT_MODEL is set), and whatever other parts add
through EXTRA_SOURCES (every enabled crew, `marina:<name>`). Then the ids served in the last week
to the calling key (an operator key: to its callers too; a read-all key: to every key). An id
whose provider is gone (no longer configured) is left out: an alias or
template that would not route, a recent id none of whose serving providers
is still configured. Each card names the /v1 doors that serve its id
(`endpoints`, passthru/doors/catalog.py)."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from django.conf import settings

from kernel import dbwriter
from ledger.spend import services
from passthru import auth, crews, formations, providers
from passthru.doors.catalog import CHAT, endpoints
from passthru.errors import ApiError

# Other parts list their own ids here: async functions returning ids owned by
# Marina. Each id is listed as given, after the formation-prefixed aliases.
EXTRA_SOURCES: list[Callable[[], Awaitable[Iterable[str]]]] = [crews.listed_ids]


def _routes(model_id: str) -> bool:
    """Whether a plain id (alias, default or <provider>/<model>) would be served now."""
    try:
        providers.plan(model_id)
    except ApiError:
        return False
    return True


def _configured(names: set[str]) -> bool:
    known = providers.providers()
    return any(name in known and known[name].configured for name in names)


async def list_models(authorization: str | None) -> dict[str, Any]:
    caller = await auth.authenticate(authorization)
    # The ids served lately are the caller's own (a read-all key's: everyone's; open mode has one tenant).
    owner = caller.owner if caller.keyed and not caller.reads_all else None
    recent = await asyncio.wrap_future(dbwriter.submit(services.recent_providers, 50, owner))
    now = int(time.time())
    ids: dict[str, str] = {}
    aliases = [alias for alias in settings.MARINA_MODEL_ALIASES if _routes(alias)]
    for alias in aliases:
        ids.setdefault(alias, "marina")
    bases = aliases + (["default"] if settings.MARINA_DEFAULT_MODEL and _routes("default") else [])
    bases = [base for base in bases if CHAT in endpoints(base)]  # formations review chats: none on an embedding model
    for formation in formations.FORMATIONS:
        # Its templates (`marina/verify:<model>`) are not callable ids: an OpenAI client
        # iterating the list would call them. /api/formations describes them.
        for base in bases:
            ids.setdefault(f"{formation.prefix}{base}", "marina")
    for source in EXTRA_SOURCES:
        for model_id in await source():
            ids.setdefault(model_id, "marina")
    for model_id, served_by in recent.items():
        # A crew is listed while it is enabled (above), not because it served lately.
        if _configured(served_by) and not crews.is_crew_id(model_id):
            ids.setdefault(model_id, "marina" if formations.find(model_id) else model_id.partition("/")[0] or "marina")
    return {
        "object": "list",
        "data": [
            {"id": i, "object": "model", "created": now, "owned_by": owner, "endpoints": endpoints(i)}
            for i, owner in ids.items()
        ],
    }
