"""Formations: model ids that wrap a plain request in extra steps.

Each formation is one module exposing an object with a `name`, the model-id
`prefix` it answers to, optional `listed_ids` (examples for /v1/models) and
`async run(ctx, body) -> Outbound`. Adding a formation means adding a module
and a line in REGISTRY."""
from __future__ import annotations

from typing import Any, Protocol

from passthru.context import RequestContext
from passthru.formations.verify import VERIFY
from passthru.responses import Outbound


class Formation(Protocol):
    name: str
    prefix: str

    async def run(self, ctx: RequestContext, body: dict[str, Any]) -> Outbound: ...


REGISTRY: list[Formation] = [VERIFY]


def find(model_id: str) -> Formation | None:
    for formation in REGISTRY:
        if model_id.startswith(formation.prefix):
            return formation
    return None
