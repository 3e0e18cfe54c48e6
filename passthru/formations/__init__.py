"""Formations: model ids that wrap a plain request in extra steps.

A family is a folder (`verify/`, `obligations/`, `argcheck/`: the formation,
its prompts, its pure logic); what they share sits beside them: `stack.py`
(obligations and argcheck stacked, around a plain or verify id), `state.py`
(per-conversation memory), `turn.py` (one answer of a step), `streamed.py` (a
formation's answer as SSE), `conversation.py`, `tooleffect.py`, `optin.py`,
`lessons.py` (recall).

Which formations there are, their names, prefixes and whether they stack, is
kernel/formations.py's registry; the dispatch here is built from it. A
formation exposes a `name`, the model-id `prefix` it answers to, optional
`listed_ids` (its id templates, for the docs and listings) and
`async run(ctx, body) -> Outbound`. `choose` decides from the id and the opt-in
headers which one answers: the stack when a stacking prefix or header is
present (built per request from `stack.plan`), else a formation of
BY_PREFIX, else the plain passthru."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from kernel import formations as registry
from passthru.context import RequestContext
from passthru.errors import ApiError
from passthru.formations.stack import StackFormation, plan
from passthru.formations.verify.formation import VERIFY, split_id
from passthru.outbound import Outbound
from passthru.providers import DEFAULT_IDS


class Formation(Protocol):
    name: str
    prefix: str

    async def run(self, ctx: RequestContext, body: dict[str, Any]) -> Outbound: ...


# What runs each registered formation: one that does not stack answers its
# prefix alone (here); the stacking ones are run by the stack (stack.CHECKS) or
# recalled for it and for the passthru (lessons: passthru/formations/lessons.py).
# tests/kernel/test_formation_registry.py holds each registry entry to a runner.
_ALONE: dict[str, Formation] = {VERIFY.name: VERIFY}

# The formations found by their id's prefix alone.
BY_PREFIX: tuple[Formation, ...] = tuple(_ALONE[entry.name] for entry in registry.ALL if not entry.stacks)
# Every formation (the stack as its class: it is built per request), for what
# describes them by their listed_ids.
FORMATIONS: tuple[Any, ...] = (*BY_PREFIX, StackFormation)

# Every marina/…: prefix an id may carry; any other is a mistyped formation.
PREFIXES = registry.PREFIXES


def _known(model_id: str) -> None:
    """Refuse `marina/<unknown>:…` here: it used to be sent to providers as a model id."""
    if model_id.startswith("marina/") and model_id not in DEFAULT_IDS and not model_id.startswith(PREFIXES):
        raise ApiError(
            404,
            f"No formation answers the model id '{model_id[:100]}'. Marina's formations are "
            f"{', '.join(PREFIXES)} (each followed by a model id), and marina/default.",
            code="model_not_found",
            param="model",
        )


def find(model_id: str) -> Formation | None:
    for formation in BY_PREFIX:
        if model_id.startswith(formation.prefix):
            return formation
    return None


def answer_model(model_id: str) -> str:
    """The plain model a formation id answers with: its stack and verify prefixes taken off
    (`marina/obligations:marina/verify:m+checker` -> `m`)."""
    inner = plan(model_id, {}).inner
    if inner.startswith(VERIFY.prefix):
        inner = split_id(inner)[0]
    return inner


def choose(model_id: str, headers: Mapping[str, str]) -> tuple[Formation | None, str, bool]:
    """(the formation that answers, the model id it or the passthru is given,
    whether the id asked for lessons with marina/lessons:).

    Opt-in prefixes and headers make a stack; `off` headers strip their prefix
    and leave what it wrapped (a plain id goes to the passthru, which then
    recalls lessons itself when asked: passthru/formations/lessons.py)."""
    planned = plan(model_id, headers)
    _known(planned.inner)
    if planned.active:
        stack = StackFormation(planned)
        return stack, model_id, planned.lessons
    return find(planned.inner), planned.inner, planned.lessons
