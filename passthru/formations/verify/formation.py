"""The verification formation: `marina/verify:<proposer>[+<checker>]`.

For each request the proposer drafts the next message (tool calls allowed),
a checker reviews the draft against the rules, the user's requests and the
tool results, and on a concrete problem the proposer writes the message once
more with the reviewer's note as a trailing system message. A revision that
changes a state-changing call without a cited conflict is discarded
(verify/guard.py). Failures of the checker or of the revision fail open: the
draft is returned.

Every step is one metered upstream call (passthru.calls.call_json) traced as
a child of one `verify` span, whose detail records the verdicts, the cited
conflicts and the guard's decisions (never conversation bodies)."""
from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from kernel import formations as registry
from kernel import money
from ledger.spend.records import SpanRecord
from passthru.calls import Completion, call_json
from passthru.context import RequestContext
from passthru.errors import ApiError, UpstreamError
from passthru.formations import lessons
from passthru.formations.conversation import first_message, text_of
from passthru.formations.tooleffect import Effect
from passthru.formations.tooleffect import effects as tool_effects
from passthru.formations.verify.guard import GuardDecision, guard_revision, tool_calls
from passthru.formations.verify.prompts import checker_messages, revision_note
from passthru.formations.verify.verdict import Verdict, parse_verdict
from passthru.outbound import Outbound, json_out
from passthru.pricing import Usage, sum_headers
from passthru.providers import Route, resolve

log = logging.getLogger(__name__)

PREFIX = registry.VERIFY.prefix
_CHECKS = (registry.OBLIGATIONS.prefix, registry.ARGCHECK.prefix)  # the stack runs them around verify, not within
MAX_ROUNDS = 3

APPROVED = "approved"
REVISED = "revised"
HELD_WRITE = "held-write"
CHECKER_UNAVAILABLE = "checker-unavailable"
REVISION_FAILED = "revision-failed"
FLAGGED = "flagged"

# Fields that carry the caller's reasoning effort to the checker.
_EFFORT_FIELDS = ("reasoning_effort", "reasoning", "thinking")


def split_id(model_id: str) -> tuple[str, str | None]:
    """`marina/verify:a+b` -> ('a', 'b'); the split is on the last `+`."""
    rest = model_id[len(PREFIX) :].strip()
    cut = rest.rfind("+")
    if cut > 0:
        return rest[:cut].strip(), rest[cut + 1 :].strip()
    return rest, None


def _route(model_id: str, role: str) -> Route:
    """A servable id or 400 model_not_found (the passthru itself says 404/503)."""
    if not model_id:
        raise ApiError(
            400,
            f"The {role} of a {PREFIX} id is empty: use {PREFIX}<proposer>[+<checker>].",
            code="model_not_found",
            param="model",
        )
    if model_id.startswith(_CHECKS):
        raise ApiError(
            400,
            f"The {role} '{model_id}' cannot be served: put {_CHECKS[0]} and {_CHECKS[1]} before {PREFIX}.",
            code="model_not_found",
            param="model",
        )
    try:
        return resolve(model_id)
    except ApiError as exc:
        if exc.code == "model_not_allowed":
            raise  # the passthru pin's 403, as it is
        raise ApiError(
            400, f"The {role} '{model_id}' cannot be served: {exc.message}", code="model_not_found", param="model"
        ) from None


def _unsupported(param: str, detail: str) -> ApiError:
    return ApiError(400, f"Unsupported parameter: '{param}'. {detail}", code="unsupported_parameter", param=param)


def _is_empty(message: Mapping[str, Any] | None) -> bool:
    return message is None or (not text_of(message.get("content")).strip() and not tool_calls(message))


def checker_effort(body: Mapping[str, Any]) -> dict[str, Any]:
    """The checker's reasoning fields: MARINA_VERIFY_CHECKER_EFFORT, else the caller's."""
    configured = settings.MARINA_VERIFY_CHECKER_EFFORT
    if configured == "off":
        return {}
    if configured:
        return {"reasoning_effort": configured}
    carried: dict[str, Any] = {}
    extra = body.get("extra_body")
    for source in (extra if isinstance(extra, Mapping) else {}, body):  # top level wins
        carried.update({k: source[k] for k in _EFFORT_FIELDS if k in source})
    return carried


@dataclass
class _Run:
    """One verify request in progress: what has been called and decided."""

    ctx: RequestContext
    body: dict[str, Any]
    proposer: Route
    checker: Route
    span: SpanRecord
    calls: list[Completion] = field(default_factory=list)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    recalled: lessons.Recalled = lessons.OFF

    async def call(self, route: Route, body: dict[str, Any], name: str) -> Completion:
        done = await call_json(self.ctx, route, body, name=name, parent_seq=self.span.seq)
        self.calls.append(done)
        return done

    def usage(self) -> tuple[Usage, int]:
        """Summed usage of every call, and how many answered calls had no price."""
        total = Usage()
        unpriced = 0
        for done in self.calls:
            if done.ok and done.usage.cost_nanousd is None:
                unpriced += 1
            total.add(done.usage)
        return total, unpriced


@dataclass
class VerifyResult:
    final: Completion  # the message returned (the draft's error reply when the draft failed)
    label: str
    run: _Run

    @property
    def lessons(self) -> str:
        """x-marina-lessons for this run."""
        return self.run.recalled.header()


class VerifyFormation:
    name = registry.VERIFY.name
    prefix = PREFIX
    listed_ids: tuple[str, ...] = (registry.VERIFY.template,)

    async def run(self, ctx: RequestContext, body: dict[str, Any]) -> Outbound:
        """Draft, review, revise once (held-write guard), respond."""
        result = await self.produce(ctx, body)
        if not result.final.ok:
            # The proposer's own error, relayed as the passthru relays it.
            return Outbound(result.final.status, {}, result.final.body, content_type="application/json")
        return self._respond(result.run, result.final, result.label)

    async def produce(self, ctx: RequestContext, body: dict[str, Any], *, parent_seq: int | None = None) -> VerifyResult:
        """The verified message for `body` (what run() answers, before the response
        is built); the stacked formations call this to check verify's output."""
        if isinstance(body.get("n"), int) and body["n"] > 1:
            raise _unsupported("n", f"{PREFIX} drafts and reviews exactly one choice.")
        proposer_id, checker_id = split_id(body["model"])
        proposer = _route(proposer_id, "proposer")
        if checker_id is None:  # `+` absent; an empty `+` part is refused by _route
            checker_id = settings.MARINA_VERIFY_CHECKER_MODEL or proposer_id
        checker = _route(checker_id, "checker")

        rounds = min(settings.MARINA_VERIFY_ROUNDS, MAX_ROUNDS)
        with ctx.timed_span("verify", parent_seq=parent_seq) as span:
            span.detail = {"proposer": proposer.served_id, "checker": checker.served_id, "max_rounds": rounds}
            recalled = await lessons.recall(
                ctx,
                lessons.last_user_text(body["messages"]),
                lessons.mode(ctx.inbound.headers, default="on"),
                query="last-user-turn",
                messages=body["messages"],
                parent_seq=span.seq,
            )
            if recalled.injected:
                # One system message after the caller's: the proposer drafts and
                # revises with it, and the checker reads it among the rules.
                body = {**body, "messages": lessons.with_system_block(body["messages"], recalled.block())}
            run = _Run(ctx, body, proposer, checker, span, recalled=recalled)
            final, label = await self._steps(run, rounds)
            return VerifyResult(final, label, run)

    async def _steps(self, run: _Run, rounds: int) -> tuple[Completion, str]:
        body, span = run.body, run.span
        draft = await run.call(run.proposer, body, "draft")
        if not draft.ok:
            span.status, span.error_kind = "error", draft.span.error_kind
            span.detail["label"] = "draft-failed"
            return draft, "draft-failed"
        current = draft
        current_message = first_message(draft.payload)
        if current_message is None:
            raise UpstreamError(run.proposer.provider.name, "bad_reply", "The proposer's reply holds no message.")

        messages = [m for m in body["messages"] if isinstance(m, Mapping)]
        effects = tool_effects(body.get("tools"))
        label = ""
        for number in range(1, max(1, rounds) + 1):
            step: dict[str, Any] = {"round": number}
            run.rounds.append(step)
            verdict = await self._review(run, messages, effects, current_message, step)
            if verdict is None:
                label = CHECKER_UNAVAILABLE
                break
            if verdict.approves:
                label = REVISED if label == REVISED else APPROVED
                break
            if rounds == 0:
                label = FLAGGED
                break
            revision = await self._revise(run, current_message, verdict, step)
            if revision is None:
                label = REVISION_FAILED
                break
            revised_message = first_message(revision.payload)
            assert revised_message is not None  # _revise checked
            decision = guard_revision(
                draft=current_message,
                revision=revised_message,
                conflict=verdict.conflict,
                conversation=messages,
                effects=effects,
            )
            self._record_guard(revision, decision, step)
            if not decision.accepted:
                label = HELD_WRITE
                break
            current, current_message, label = revision, revised_message, REVISED

        run.ctx.formation_label = label
        span.detail.update(self._summary(label, run.rounds))
        return current, label

    async def _review(
        self,
        run: _Run,
        messages: list[Mapping[str, Any]],
        effects: Mapping[str, Effect],
        draft: Mapping[str, Any],
        step: dict[str, Any],
    ) -> Verdict | None:
        """The checker's verdict, or None when it is out or unreadable (fail open)."""
        review_body = {
            "messages": checker_messages(messages, run.body.get("tools"), effects, draft),
            "stream": False,
            **checker_effort(run.body),
        }
        opened = len(run.ctx.spans)
        try:
            review = await run.call(run.checker, review_body, "review")
        except ApiError as exc:
            log.warning("verify %s: checker failed: %s", run.ctx.request_id, exc.message)
            step["verdict"] = "unavailable"
            step["checker_error"] = exc.trace_kind
            if len(run.ctx.spans) > opened:  # the call got as far as opening its span
                run.ctx.spans[opened].detail = {"verdict": "unavailable"}
            return None
        if not review.ok:
            step["verdict"] = "unavailable"
            step["checker_error"] = f"http_{review.status}"
            review.span.detail = {"verdict": "unavailable"}
            return None
        verdict = parse_verdict(text_of((first_message(review.payload) or {}).get("content")))
        if verdict is None:
            step["verdict"] = "unreadable"
            review.span.detail = {"verdict": "unreadable"}
            return None
        step.update(verdict.as_detail(settings.MARINA_TRACE_BODIES))
        review.span.detail = verdict.as_detail(settings.MARINA_TRACE_BODIES)
        return verdict

    async def _revise(
        self, run: _Run, draft: Mapping[str, Any], verdict: Verdict, step: dict[str, Any]
    ) -> Completion | None:
        """The proposer's second attempt, or None when it failed or came back empty."""
        note = {"role": "system", "content": revision_note(draft, verdict)}
        revision_body = {**run.body, "messages": [*run.body["messages"], note]}
        try:
            revision = await run.call(run.proposer, revision_body, "revision")
        except ApiError as exc:
            log.warning("verify %s: revision failed: %s", run.ctx.request_id, exc.message)
            step["revision"] = exc.trace_kind
            return None
        if not revision.ok or _is_empty(first_message(revision.payload)):
            step["revision"] = f"http_{revision.status}" if not revision.ok else "empty"
            revision.span.detail = {"revision": step["revision"]}
            return None
        return revision

    @staticmethod
    def _record_guard(revision: Completion, decision: GuardDecision, step: dict[str, Any]) -> None:
        guard: dict[str, Any] = {"guard": decision.label, "guard_reason": decision.reason, "writes_changed": decision.writes_changed}
        if decision.invented:  # values of the revision's: with bodies only (MARINA_TRACE_BODIES)
            guard["invented_ids"] = list(decision.invented) if settings.MARINA_TRACE_BODIES else len(decision.invented)
        step.update(guard)
        revision.span.detail = guard

    @staticmethod
    def _summary(label: str, rounds: list[dict[str, Any]]) -> dict[str, Any]:
        """Top-level keys of the verify span's detail: the label and the last round's decisions."""
        last = rounds[-1] if rounds else {}
        summary: dict[str, Any] = {"label": label, "rounds": rounds, "verdict": last.get("verdict")}
        for key in ("conflict", "guard", "guard_reason"):
            if key in last:
                summary[key] = last[key]
        return summary

    @staticmethod
    def _respond(run: _Run, final: Completion, label: str) -> Outbound:
        usage, unpriced = run.usage()
        payload = copy.deepcopy(final.payload) or {}
        payload["model"] = run.ctx.requested_model or run.body["model"]
        payload["usage"] = usage.as_payload()
        headers = {
            "x-marina-verify": label,
            # Sum of the priced calls; x-marina-cost-unpriced-calls says how many were not.
            "x-marina-cost-usd": money.plain(usage.cost_nanousd or 0),
            "x-marina-upstream-model": run.proposer.served_id,
            lessons.HEADER: run.recalled.header(),
        }
        headers.update(sum_headers(usage, unpriced))
        return json_out(200, payload, headers)


VERIFY = VerifyFormation()
