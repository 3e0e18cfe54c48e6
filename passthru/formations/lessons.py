"""Lessons at request time: recall from the ledger's lessons (ranked by the
database's full-text index, ledger/lessons/search.py) and where they go.

- `marina/verify:` recalls on every request (MARINA_LESSONS=on): the query is
  the last user turn, the lessons go in one system message right after the
  caller's system messages, so the proposer and the checker both see them.
- Plain requests and the stacked formations opt in with `marina/lessons:<id>`
  (stackable with marina/obligations: and marina/argcheck:) or the request
  header `x-marina-lessons: on`: the query is the conversation's opening
  request, so the set is the same on every turn, and the lessons ride in the
  trailing note, after the cacheable prefix (conversation.with_trailing_note).

The mode is the lower of the server's MARINA_LESSONS and the request's
(`x-marina-lessons: on|observe|off`): `on` injects, `observe` recalls and
reports without injecting, `off` does neither.

**Which lessons.** A request's benchmark is the one `x-marina-eval:
benchmark=<id>` names, else the τ² domain its system text is recognised by
(τ²'s policy opens "# Airline Agent Policy" … "As an airline agent, you can
help users"): τ²'s CLI sends no header. A request whose benchmark is known
sees only lessons of that benchmark, so retail's never reach airline (one of
no known benchmark may see any, by relevance). A request of a benchmark is a measurement unless it is
explicitly marked as training (`x-marina-eval: …; mode=train`): with or
without the header, a measured request never sees a lesson learned from the
benchmark it is measured on, which, scoped as above, means none at all. The response header `x-marina-lessons` is `0`, the
injected ids (`12,40`) or `observe:12,40`. Each recall is a span (`lessons`)
whose detail holds the mode, the ids and what was excluded, never text.

A failing recall fails open: no lessons, the span marked failed."""
from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from kernel import formations as registry
from ledger.lessons import services
from passthru.context import RequestContext
from passthru.formations import state
from passthru.formations.conversation import SYSTEM_ROLES, text_of
from passthru.formations.optin import header_mode

log = logging.getLogger(__name__)

PREFIX = registry.LESSONS.prefix
HEADER = registry.LESSONS.header
HEADING = "LESSONS (from past outcomes; trusted first):"
_RANK = {"off": 0, "observe": 1, "on": 2}


def requested(headers: Mapping[str, str]) -> str | None:
    """The request's x-marina-lessons (on, observe, off), None when absent; 400 otherwise."""
    return header_mode(headers, HEADER)


def mode(headers: Mapping[str, str], *, default: str) -> str:
    """The lower of MARINA_LESSONS and the request's mode (`default` without the header)."""
    asked = requested(headers)
    return min(settings.MARINA_LESSONS, asked if asked is not None else default, key=_RANK.__getitem__)


def _eval_fields(headers: Mapping[str, str]) -> dict[str, str]:
    fields: dict[str, str] = {}
    for part in headers.get("x-marina-eval", "").split(";"):
        key, _, value = part.partition("=")
        fields[key.strip().lower()] = value.strip()
    return fields


def measured_benchmark(headers: Mapping[str, str]) -> str:
    """`x-marina-eval: benchmark=<id>; mode=measure` -> '<id>'; '' otherwise."""
    fields = _eval_fields(headers)
    return fields.get("benchmark", "") if fields.get("mode", "").lower() == "measure" else ""


# τ²'s agent policies (tau2/data/tau2/domains/<domain>/policy.md), as its system prompt carries them.
_TAU2_POLICY = re.compile(
    r"#\s*(airline|retail|telecom|mock)\s+(?:agent|domain)\s+policy|as an? (airline|retail|telecom) agent, you can help users",
    re.IGNORECASE,
)
# banking_knowledge's policy is its retrieval config's prompt, headed by the same component whatever the
# config (prompts/components/policy_header.md): "# Rho-Bank Customer Service Policy".
_BANKING_POLICY = re.compile(
    r"#\s*Rho-Bank Customer Service Policy|customer service agent for Rho-Bank", re.IGNORECASE
)
_SCAN_CHARS = 4000  # of the system text: the policy's heading comes early


def recognised_benchmark(messages: Sequence[Any]) -> str:
    """`tau2-<domain>` when the system text is one of τ²'s agent policies, else ''."""
    for message in messages:
        if isinstance(message, Mapping) and message.get("role") in SYSTEM_ROLES:
            text = text_of(message.get("content"))[:_SCAN_CHARS]
            found = _TAU2_POLICY.search(text)
            if found:
                return f"tau2-{(found.group(1) or found.group(2)).lower()}"
            if _BANKING_POLICY.search(text):
                return "tau2-banking_knowledge"
    return ""


@dataclass(frozen=True)
class Scope:
    benchmark: str  # the request's benchmark ('' none known)
    measured: bool  # a measurement: its own benchmark's lessons are excluded

    @property
    def exclude(self) -> str:
        return self.benchmark if self.measured else ""


def scope_of(headers: Mapping[str, str], messages: Sequence[Any]) -> Scope:
    """The request's benchmark and whether it is being measured (see the module doc)."""
    fields = _eval_fields(headers)
    benchmark = fields.get("benchmark", "") or recognised_benchmark(messages)
    training = fields.get("mode", "").lower() in ("train", "training")
    return Scope(benchmark, bool(benchmark) and not training)


@dataclass(frozen=True)
class Recalled:
    mode: str  # on | observe | off
    ids: list[int] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)

    @property
    def injected(self) -> bool:
        return self.mode == "on" and bool(self.ids)

    def header(self) -> str:
        if not self.ids:
            return "0"
        ids = ",".join(str(i) for i in self.ids)
        return f"observe:{ids}" if self.mode == "observe" else ids

    def block(self) -> str:
        """The text injected ('' unless injected)."""
        if not self.injected:
            return ""
        return "\n".join([HEADING, *(f"- {rule}" for rule in self.rules)])


OFF = Recalled("off")


async def recall(
    ctx: RequestContext, text: str, lessons_mode: str, *, query: str, messages: Sequence[Any] = (),
    parent_seq: int | None = None,
) -> Recalled:  # fmt: skip
    """Recall for `text` (a span), or OFF without a span when the mode is off.
    `messages`: the request's, to recognise its benchmark."""
    if lessons_mode == "off":
        return OFF
    scope = scope_of(ctx.inbound.headers, messages)
    exclude = scope.exclude
    span = ctx.open_span("lessons", parent_seq=parent_seq)
    started = time.perf_counter()
    try:
        matches = await state.run_on_state_thread(
            functools.partial(services.recall, text, benchmark=scope.benchmark or None, exclude_benchmark=exclude)
        )
    except Exception as exc:  # the lessons must never fail a request
        log.warning("%s: lesson recall failed: %s", ctx.request_id, exc)
        span.status, span.error_kind = "error", "recall_failed"
        matches = []
    finally:
        span.duration_ms = (time.perf_counter() - started) * 1000
    recalled = Recalled(lessons_mode, [m.id for m in matches], [m.rule for m in matches])
    span.detail = {"mode": lessons_mode, "query": query, "ids": recalled.ids, "injected": recalled.injected}
    if scope.benchmark:
        span.detail["benchmark"] = scope.benchmark
    if exclude:
        span.detail["excluded_benchmark"] = exclude
    return recalled


def last_user_text(messages: Sequence[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, Mapping) and message.get("role") == "user":
            return text_of(message.get("content"))
    return ""


def opening_request(messages: Sequence[Any]) -> str:
    """The first user turn: the same on every turn of a conversation."""
    for message in messages:
        if isinstance(message, Mapping) and message.get("role") == "user":
            return text_of(message.get("content"))
    return ""


def with_system_block(messages: Sequence[Any], block: str) -> list[Any]:
    """`block` as one system message right after the caller's leading system messages."""
    out = list(messages)
    if not block:
        return out
    at = 0
    while at < len(out) and isinstance(out[at], Mapping) and out[at].get("role") in SYSTEM_ROLES:
        at += 1
    out.insert(at, {"role": "system", "content": block})
    return out
