"""POST /v1/responses (OpenAI's Responses API), streamed and not.

Providers that speak it (openai, openrouter) get the request as it came (the
upstream id in `model`), and their answer and events go back as they came,
metered from the `usage` of the response (for streams: of the
`response.completed` event). The others get it translated into a chat
completion (passthru/doors/translate.py), and their answer translated back:
a `response` object, or the Responses stream events (`response.created`,
`response.output_text.delta`, the function call events, `response.completed`
with usage). A bare id (`gpt-4o-mini`) is tried on each configured provider
in turn, as on chat, each natively or translated: so it reaches OpenAI even
when Anthropic comes first. Either way the call is one metered, traced upstream call
through passthru/calls.py, held against the daily cap and rate-limited like chat.

Formations and crews (`marina/…`, `marina:…`) run on /v1/chat/completions:
their steps review and rewrite chat messages, which a Responses request
carried natively is not; here they are a 400 naming that door."""
from __future__ import annotations

import json
from typing import Any

from kernel.conversation import identify
from ledger.spend.records import SpanRecord
from passthru import response_owners
from passthru.calls import encode
from passthru.context import Inbound, RequestContext
from passthru.doors import common, translate
from passthru.endpoints import CHAT, Endpoint, with_model
from passthru.errors import ApiError
from passthru.outbound import Outbound
from passthru.pricing import Usage, price, reported_tokens
from passthru.providers import Plan, Route, plan
from passthru.streaming import Meter

# Providers whose own API has /responses.
NATIVE = frozenset({"openai", "openrouter"})
_USAGE_EVENTS = (b'"response.completed"', b'"response.incomplete"', b'"response.failed"')


def usage_of(reported: Any) -> Usage | None:
    """Token counts from a Responses `usage` object (input/output tokens and their details)."""
    if not isinstance(reported, dict):
        return None
    inputs = reported.get("input_tokens_details") or {}
    outputs = reported.get("output_tokens_details") or {}
    return Usage(
        prompt_tokens=reported_tokens(reported.get("input_tokens")),
        completion_tokens=reported_tokens(reported.get("output_tokens")),
        cached_tokens=reported_tokens(inputs.get("cached_tokens")) if isinstance(inputs, dict) else 0,
        reasoning_tokens=reported_tokens(outputs.get("reasoning_tokens")) if isinstance(outputs, dict) else 0,
    )


def _priced(route: Route, reported: Any) -> Usage:
    usage = usage_of(reported) or Usage()
    price(usage, provider=route.provider.name, upstream_model=route.upstream_model, reported=reported)
    return usage


def _usage(route: Route, payload: dict[str, Any]) -> Usage:
    return _priced(route, payload.get("usage"))


class ResponsesMeter(Meter):
    """Meters a native Responses stream: the usage is in the final event's
    `response` (completed, incomplete or failed). Nothing is held back."""

    def keep(self, event: bytes) -> bool:
        if self.span.ttft_ms is None:
            super().keep(b"")  # the first-byte time
        if b'"response.created"' in event and "response_id" not in self.span.detail:
            created = _json(event)
            if isinstance(created, dict) and isinstance(created.get("response"), dict):
                _keep_id(self.span, created["response"].get("id"))
        if b'"usage"' in event and any(kind in event for kind in _USAGE_EVENTS):
            data = common.event_data(event)
            try:
                payload = json.loads(data) if data else None
            except ValueError:
                return True
            response = payload.get("response") if isinstance(payload, dict) else None
            if isinstance(response, dict) and isinstance(response.get("usage"), dict):
                self.usage = _priced(self.route, response["usage"])
        return True


def _keep_id(span: SpanRecord, response_id: Any) -> None:
    """The answer's id on its span, and so on its trace: whose it is (passthru/response_owners.py)."""
    if isinstance(response_id, str) and response_id:
        span.detail["response_id"] = response_id[:100]


def _json(event: bytes) -> Any:
    data = common.event_data(event)
    try:
        return json.loads(data) if data else None
    except ValueError:
        return None


def _meter(route: Route, span: SpanRecord, hide: bool) -> Meter:
    return ResponsesMeter(route, span, hide_usage_chunk=False)


def _cap_view(body: dict[str, Any]) -> dict[str, Any]:
    """The cap's estimate reads max_tokens: the Responses API calls it max_output_tokens."""
    limit = body.get("max_output_tokens")
    return {**body, "max_tokens": limit} if isinstance(limit, int) and not isinstance(limit, bool) else body


RESPONSES = Endpoint("responses", with_model, _usage, _meter, cap_view=_cap_view)


async def responses(inbound: Inbound) -> Outbound:
    return await common.serve(inbound, _respond)


async def _respond(ctx: RequestContext, body: dict[str, Any]) -> Outbound:
    common.check_fields(body, input="str|objects", instructions="str?", tools="objects?", max_output_tokens="int?")
    model = body["model"]
    common.refuse_formations(model, ctx.inbound.headers, "/v1/responses")
    await response_owners.check_previous(ctx, body)  # another key's response id: 404
    ctx.route = "passthru"
    routes = plan(model)
    # The conversation's identity (seed, opening and system hashes), as chat's traces carry it.
    ctx.conversation = identify(translate.conversation_of(body))
    attempt = _Attempts(routes, body)
    routes = Plan(routes.requested, attempt.routes, routes.fallback)
    if not ctx.stream:
        route, done = await common.first_json(ctx, routes, body, RESPONSES, attempt=attempt)
        native = _served(ctx, route)
        if native and done.ok and isinstance(done.payload, dict):
            _keep_id(done.span, done.payload.get("id"))  # whose it is (passthru/response_owners.py)
        if native or not done.ok or done.payload is None:
            return common.plain_out(route, done)
        return common.plain_out(route, done, encode(translate.to_response(done.payload, body)))
    route, reply = await common.first_stream(ctx, routes, body, RESPONSES, attempt=attempt)
    native = _served(ctx, route)
    if reply.events is None:
        return await common.relayed_error(ctx, reply)
    return common.stream_out(ctx, route, reply.events if native else translate.to_events(reply.events, body))


class _Attempts:
    """What each route of a plan is sent, as chat's fallback loop tries them:
    a provider that speaks Responses gets the request as it came; any other
    gets it as a chat completion (passthru/doors/translate.py), its answer
    translated back. So a bare id reaches OpenAI whichever provider comes first.
    A request that cannot be put as a chat completion (a feature only the
    Responses API has) goes to the native providers alone, or is that 400."""

    def __init__(self, routes: Plan, body: dict[str, Any]) -> None:
        self.body = body
        self.chat_body: dict[str, Any] | None = None
        self.routes = routes.routes
        if all(r.provider.name in NATIVE for r in routes.routes):
            return
        try:
            self.chat_body = translate.to_chat(body)
        except ApiError:
            self.routes = tuple(r for r in routes.routes if r.provider.name in NATIVE)
            if not self.routes:
                raise

    def __call__(self, route: Route) -> tuple[dict[str, Any], Endpoint]:
        if route.provider.name in NATIVE or self.chat_body is None:
            return self.body, RESPONSES
        return self.chat_body, CHAT


def _served(ctx: RequestContext, route: Route) -> bool:
    """Whether the route that answered speaks Responses; the trace's route says which way it went."""
    if route.provider.name in NATIVE:
        return True
    ctx.route = "passthru:translated"
    return False
