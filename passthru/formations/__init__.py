"""Formations: model ids that wrap a plain request in extra steps.

Each formation is one module exposing an object with a `name`, the model-id
`prefix` it answers to, optional `listed_ids` (templates for /v1/models) and
`async run(ctx, body) -> Outbound`. Adding a formation means adding a module
and a line in REGISTRY. The obligations ledger and the argument check stack
(passthru/formations/stack.py): `choose` decides from the id and the opt-in
headers which one answers."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from passthru.context import RequestContext
from passthru.formations.stack import StackFormation, plan
from passthru.formations.verify import VERIFY
from passthru.responses import Outbound


class Formation(Protocol):
    name: str
    prefix: str

    async def run(self, ctx: RequestContext, body: dict[str, Any]) -> Outbound: ...


REGISTRY: list[Any] = [VERIFY, StackFormation]


def find(model_id: str) -> Formation | None:
    for formation in REGISTRY:
        if isinstance(formation, type):
            continue
        if model_id.startswith(formation.prefix):
            return formation
    return None


def choose(model_id: str, headers: Mapping[str, str]) -> tuple[Formation | None, str, bool]:
    """(the formation that answers, the model id it or the passthru is given,
    whether the id asked for lessons with marina/lessons:).

    Opt-in prefixes and headers make a stack; `off` headers strip their prefix
    and leave what it wrapped (a plain id goes to the passthru, which then
    recalls lessons itself when asked: passthru/formations/lessons.py)."""
    planned = plan(model_id, headers)
    if planned.active:
        stack = StackFormation(planned)
        return stack, model_id, planned.lessons
    return find(planned.inner), planned.inner, planned.lessons
