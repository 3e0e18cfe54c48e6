"""Stacking: `marina/obligations:` and `marina/argcheck:` in any order, with or
without the opt-in headers, around a plain model id or a `marina/verify:` id.

    marina/obligations:marina/argcheck:openrouter/openai/gpt-5.2
    marina/argcheck:marina/verify:openrouter/a+openrouter/b

The prefixes are stripped from the front; `x-marina-obligations` /
`x-marina-argcheck` (`on`, `observe`, `off`; also true/1, false/0) opt in
with an unchanged id, and `off` wins over a prefix. Verify produces the
draft; the obligations ledger then checks it (one judgement, one retry at
most), and the argument check checks whatever the ledger returned (its retry's
note carries the ledger's reminder too). A retry through verify is a whole
verify run, so what goes back has always been reviewed.

One conversation state row per history checkpoint (passthru/formations/state.py)
holds both checks' memory; the checkpoint the history led to is read before the
first call, and the state after the turn is stored under the turn's own key after
the last one."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from kernel import formations as registry
from kernel import money
from passthru.context import RequestContext
from passthru.errors import ApiError, UpstreamError
from passthru.formations import lessons, state
from passthru.formations.argcheck import formation as argcheck_module
from passthru.formations.argcheck.formation import ArgCheck
from passthru.formations.obligations import formation as obligations_module
from passthru.formations.obligations.formation import ObligationsCheck
from passthru.formations.optin import header_mode
from passthru.formations.turn import Answer, Turn
from passthru.formations.verify.formation import PREFIX as VERIFY_PREFIX
from passthru.formations.verify.formation import split_id
from passthru.outbound import Outbound, json_out
from passthru.pricing import Usage, sum_headers
from passthru.providers import Route, resolve

OBLIGATIONS_PREFIX = registry.OBLIGATIONS.prefix
ARGCHECK_PREFIX = registry.ARGCHECK.prefix
CREW_PREFIX = registry.CREW_PREFIX
# The stacking formations the stack runs itself; lessons (also stacking) is recalled for it.
CHECKS = (registry.OBLIGATIONS, registry.ARGCHECK)
OBLIGATIONS, ARGCHECK = registry.OBLIGATIONS.name, registry.ARGCHECK.name


@dataclass(frozen=True)
class Plan:
    obligations: str  # on | observe | '' (not running)
    argcheck: str
    inner: str  # the id the checks wrap: a plain id or a marina/verify: id
    lessons: bool = False  # marina/lessons: was among the prefixes

    @property
    def active(self) -> bool:
        return bool(self.obligations or self.argcheck)


def plan(model_id: str, headers: Any) -> Plan:
    """Which checks run, and what they wrap."""
    modes = {check.name: "" for check in CHECKS}
    inner = model_id
    with_lessons = False
    while True:
        if inner.startswith(lessons.PREFIX):
            with_lessons, inner = True, inner[len(lessons.PREFIX) :]
            continue
        check = next((c for c in CHECKS if inner.startswith(c.prefix)), None)
        if check is None:
            break
        modes[check.name], inner = "on", inner[len(check.prefix) :]
    for check in CHECKS:
        told = header_mode(headers, check.header)
        if told is not None:
            modes[check.name] = "" if told == "off" else told
    return Plan(modes[OBLIGATIONS], modes[ARGCHECK], inner, with_lessons)


def _route(model_id: str, what: str) -> Route:
    if not model_id:
        raise ApiError(400, f"The {what} of this model id is empty.", code="model_not_found", param="model")
    if model_id.startswith(registry.STACKING_PREFIXES):
        raise ApiError(
            400,
            f"'{model_id}' cannot be the {what}: put {_and(registry.STACKING_PREFIXES)} before {VERIFY_PREFIX}.",
            code="model_not_found",
            param="model",
        )
    try:
        return resolve(model_id)
    except ApiError as exc:
        raise ApiError(400, f"The {what} '{model_id}' cannot be served: {exc.message}", code="model_not_found", param="model") from None


def _and(words: tuple[str, ...]) -> str:
    """`a, b and c`."""
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else "".join(words)


def _unsupported(param: str, detail: str) -> ApiError:
    return ApiError(400, f"Unsupported parameter: '{param}'. {detail}", code="unsupported_parameter", param=param)


class StackFormation:
    """The obligations ledger and/or the argument check around one model id."""

    name = "stack"
    prefix = OBLIGATIONS_PREFIX  # find() uses plan(); listed_ids are the templates
    listed_ids: tuple[str, ...] = tuple(entry.template for entry in registry.ALL if entry.stacks)

    def __init__(self, planned: Plan) -> None:
        self.plan = planned

    @property
    def route_name(self) -> str:
        parts = [p for p, on in ((OBLIGATIONS, self.plan.obligations), (ARGCHECK, self.plan.argcheck)) if on]
        if self.plan.inner.startswith(VERIFY_PREFIX):
            parts.append(registry.VERIFY.name)
        return "+".join(parts)

    async def run(self, ctx: RequestContext, body: dict[str, Any]) -> Outbound:
        planned = self.plan
        if planned.inner.startswith(CREW_PREFIX):
            raise ApiError(
                400,
                f"A crew cannot be wrapped ('{planned.inner}'): give the crew a model id with these prefixes instead.",
                code="model_not_found",
                param="model",
            )
        if isinstance(body.get("n"), int) and body["n"] > 1:
            raise _unsupported("n", f"{OBLIGATIONS_PREFIX} and {ARGCHECK_PREFIX} check exactly one choice.")
        verify = planned.inner.startswith(VERIFY_PREFIX)
        agent_id = split_id(planned.inner)[0] if verify else planned.inner
        agent = _route(agent_id, "proposer" if verify else "model")
        with ctx.timed_span(self.route_name[:32]) as span:
            return await self._steps(ctx, body, span, agent, verify)

    async def _steps(self, ctx: RequestContext, body: dict[str, Any], span: Any, agent: Route, verify: bool) -> Outbound:
        planned = self.plan
        turn_body = {**body, "model": planned.inner}
        turn = Turn(ctx, turn_body, span, agent, verify)
        conv = state.conversation(
            ctx.key_name or "open", ctx.session, body["messages"], body.get("tools"), body.get("seed"), str(body.get("model") or "")
        )
        loaded = await state.load(conv)
        span.detail = {"key": _short(loaded.key), "state": "found" if loaded.found_key else "new"}
        if loaded.error:
            span.detail["state"] = f"unavailable:{loaded.error}"
        elif loaded.unreadable:
            span.detail["state"] = "unreadable"

        ob = ac = None
        if planned.obligations:
            ob = ObligationsCheck.start(
                planned.obligations, loaded.state.get("obligations"), _judge(obligations_module.judge_route(agent_id_of(agent)))
            )
        if planned.argcheck:
            ac = ArgCheck.start(planned.argcheck, loaded.state.get("argcheck"), _judge(argcheck_module.judge_route(agent_id_of(agent))))

        recalled = lessons.OFF
        lessons_wanted = planned.lessons or lessons.requested(ctx.inbound.headers) is not None
        if lessons_wanted and not verify:  # verify recalls on its own (passthru/formations/verify/formation.py)
            lessons_mode = lessons.mode(ctx.inbound.headers, default="on" if planned.lessons else "off")
            recalled = await lessons.recall(
                ctx, lessons.opening_request(turn.messages), lessons_mode, query="opening", messages=turn.messages,
                parent_seq=span.seq,
            )
            turn.lessons_note = recalled.block()

        note = await ob.prepare(turn) if ob else ""
        answer = await turn.main(note, "draft")
        if not answer.ok:
            # Nothing is stored: the client got no answer to build on, and its retry of this
            # history reads the same checkpoint as this turn did (passthru/formations/state.py).
            span.status, span.error_kind = "error", answer.completion.span.error_kind
            return Outbound(answer.completion.status, {}, answer.completion.body, content_type="application/json")
        if answer.message is None:
            raise UpstreamError(agent.provider.name, "bad_reply", "The model's reply holds no message.")
        if ob:
            answer = await ob.finish(turn, answer)
        if ac:
            answer = await ac.finish(turn, answer, ob.reminder if ob else "")
        await self._commit(conv, ob, ac, span)
        out = self._respond(ctx, span, agent, answer, ob, ac)
        if lessons_wanted and not verify:
            out.headers[lessons.HEADER] = recalled.header()
        return out

    async def _commit(self, conv: state.Conversation, ob: ObligationsCheck | None, ac: ArgCheck | None, span: Any) -> None:
        def change(stored: dict[str, Any]) -> dict[str, Any]:
            out = dict(stored)
            if ob is not None and not ob.skipped:
                out["obligations"] = ob.change(stored.get("obligations"))
            if ac is not None:
                out["argcheck"] = ac.change(stored.get("argcheck"))
            return out

        error = await state.commit(conv, change)
        if error:
            span.detail["state_write"] = f"failed:{error}"

    def _respond(
        self, ctx: RequestContext, span: Any, agent: Route, answer: Answer, ob: ObligationsCheck | None, ac: ArgCheck | None
    ) -> Outbound:
        usage, unpriced = _usage(ctx)
        payload = copy.deepcopy(answer.completion.payload) or {}
        payload["model"] = ctx.requested_model or payload.get("model")
        payload["usage"] = usage.as_payload()
        headers = {
            "x-marina-upstream-model": agent.served_id,
            "x-marina-cost-usd": money.plain(usage.cost_nanousd or 0),
        }
        labels = []
        if ob is not None:
            headers["x-marina-obligations"] = ob.header()
            headers["x-marina-obligations-cost-usd"] = money.plain(_cost(ctx, ob.cost_seqs))
            span.detail["obligations"] = ob.header()
            labels.append(f"obligations={ob.check or ob.skipped}")
        if ac is not None:
            headers["x-marina-argcheck"] = ac.header()
            headers["x-marina-argcheck-cost-usd"] = money.plain(_cost(ctx, ac.cost_seqs))
            span.detail["argcheck"] = ac.header()
            span.detail["argcheck_calls"] = ac.calls
            labels.append(f"argcheck={ac.check}")
        if answer.label:
            headers["x-marina-verify"] = answer.label
            headers[lessons.HEADER] = answer.lessons or "0"
            labels.append(f"verify={answer.label}")
        headers.update(sum_headers(usage, unpriced))
        ctx.formation_label = ";".join(labels)[:64]
        return json_out(200, payload, headers)


def agent_id_of(route: Route) -> str:
    return route.served_id


def _judge(model_id: str) -> Route:
    return _route(model_id, "judge model")


def _short(key: str) -> str:
    """The key as traced: the caller's name and a hash prefix, never a session id in full."""
    who, _, rest = key.partition("|")
    return f"{who}|{rest[:14]}"


def _usage(ctx: RequestContext) -> tuple[Usage, int]:
    total, unpriced = Usage(), 0
    for span in ctx.spans:
        if not span.provider:
            continue
        if span.status == "ok" and span.cost_nanousd is None and span.http_status and span.http_status < 300:
            unpriced += 1
        total.add(
            Usage(
                prompt_tokens=span.prompt_tokens,
                completion_tokens=span.completion_tokens,
                cached_tokens=span.cached_tokens,
                reasoning_tokens=span.reasoning_tokens,
                cost_nanousd=span.cost_nanousd,
                cost_source=span.cost_source,
            )
        )
    return total, unpriced


def _cost(ctx: RequestContext, seqs: list[int] | range) -> int:
    return sum(ctx.spans[i].cost_nanousd or 0 for i in seqs if ctx.spans[i].provider)
