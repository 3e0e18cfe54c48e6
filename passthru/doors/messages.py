"""POST /v1/messages (Anthropic's Messages API), streamed and not.

Passed through to the providers that speak it: `anthropic/<model>` (Anthropic,
its key as `x-api-key`, the client's `anthropic-version` and `anthropic-beta`
forwarded) and `openrouter/anthropic/<model>` (OpenRouter's /messages). The
body goes as it came but for the upstream id: `cache_control` markers are
kept. The key is Marina's, as `x-api-key` (what Anthropic's clients send) or
`Authorization: Bearer`.

Metered exactly from Anthropic's usage: `input_tokens` counts only the
uncached input, so the span's prompt tokens are input + cache reads + cache
writes, cache reads are its cached tokens, and cache writes (priced at the
model's cache-write rate) are in its detail; a stream's usage is that of
`message_start` updated by the last `message_delta`. Errors are Anthropic's
envelope `{"type":"error","error":{"type","message"}}`, Marina's own and
mid-stream ones too."""
from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

from kernel.conversation import identify
from ledger.spend.records import SpanRecord
from passthru.context import Inbound, RequestContext
from passthru.doors import common
from passthru.endpoints import Endpoint, with_model
from passthru.errors import ApiError
from passthru.outbound import Outbound
from passthru.pricing import Usage, price, reported_tokens
from passthru.providers import Plan, Route, plan
from passthru.streaming import Meter

# Providers whose API has Anthropic's /messages.
SPEAKERS = frozenset({"anthropic", "openrouter"})

_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
}


def anthropic_error(exc: ApiError) -> Outbound:
    """An error in Anthropic's envelope (its clients read `error.type` and `error.message`)."""
    kind = _TYPE_BY_STATUS.get(exc.status, "api_error")
    payload = {"type": "error", "error": {"type": kind, "message": exc.message}}
    return Outbound(exc.status, dict(exc.headers), json.dumps(payload, ensure_ascii=False).encode())


def usage_of(reported: Any) -> Usage | None:
    """Token counts from Anthropic's `usage` (input_tokens excludes the cache's reads and writes)."""
    if not isinstance(reported, dict):
        return None
    read, written = reported_tokens(reported.get("cache_read_input_tokens")), reported_tokens(reported.get("cache_creation_input_tokens"))
    return Usage(
        prompt_tokens=reported_tokens(reported.get("input_tokens")) + read + written,
        completion_tokens=reported_tokens(reported.get("output_tokens")),
        cached_tokens=read,
        cache_write_tokens=written,
    )


def _priced(route: Route, reported: Any) -> Usage:
    usage = usage_of(reported) or Usage()
    price(usage, provider=route.provider.name, upstream_model=route.upstream_model, reported=reported, cache_writes=True)
    return usage


def _usage(route: Route, payload: dict[str, Any]) -> Usage:
    return _priced(route, payload.get("usage"))


class MessagesMeter(Meter):
    """Meters an Anthropic stream: `message_start` carries the input side of
    the usage, each `message_delta` the output so far (and, from newer
    servers, the input again). Nothing is held back."""

    def __init__(self, route: Route, span: SpanRecord) -> None:
        super().__init__(route, span, hide_usage_chunk=False)
        self.reported: dict[str, Any] = {}

    def keep(self, event: bytes) -> bool:
        if self.span.ttft_ms is None:
            super().keep(b"")  # the first-byte time
        if b'"usage"' not in event:
            return True
        data = common.event_data(event)
        try:
            payload = json.loads(data) if data else None
        except ValueError:
            return True
        if not isinstance(payload, dict):
            return True
        if payload.get("type") == "message_start" and isinstance(payload.get("message"), dict):
            reported = payload["message"].get("usage")
        elif payload.get("type") == "message_delta":
            reported = payload.get("usage")
        else:
            return True
        if isinstance(reported, dict):
            self.reported.update({k: v for k, v in reported.items() if v is not None})
            self.usage = _priced(self.route, self.reported)
        return True


def _meter(route: Route, span: SpanRecord, hide: bool) -> Meter:
    return MessagesMeter(route, span)


MESSAGES = Endpoint("messages", with_model, _usage, _meter)


async def messages(inbound: Inbound) -> Outbound:
    return await common.serve(inbound, _messages, envelope=anthropic_error)


async def _messages(ctx: RequestContext, body: dict[str, Any]) -> Outbound:
    model = body["model"]
    common.refuse_formations(model, ctx.inbound.headers, "/v1/messages")
    common.check_fields(body, max_tokens="int", messages="objects", system="str|objects?")
    if not body["messages"]:
        raise ApiError(400, "messages: a non-empty array is required.", param="messages")
    for i, message in enumerate(body["messages"]):
        if not isinstance(message.get("role"), str):
            raise ApiError(400, f"messages[{i}] must have a string 'role'.", param=f"messages[{i}]")
    ctx.route = "passthru"
    system = body.get("system")
    opening = [{"role": "system", "content": system}] if system else []
    ctx.conversation = identify({"seed": None, "messages": opening + body["messages"]})  # hashes, as chat's traces
    routes = plan(model)
    kept = tuple(r for r in routes.routes if r.provider.name in SPEAKERS)
    if not kept:
        raise ApiError(
            400,
            f"The model '{model}' is not served by a provider with Anthropic's Messages API: use anthropic/<model> "
            "or openrouter/anthropic/<model> here, or POST /v1/chat/completions.",
            param="model",
        )
    routes = Plan(routes.requested, kept, routes.fallback)
    if not ctx.stream:
        route, done = await common.first_json(ctx, routes, body, MESSAGES)
        return common.plain_out(route, done)
    route, reply = await common.first_stream(ctx, routes, body, MESSAGES)
    if reply.events is None:
        return await common.relayed_error(ctx, reply)
    return common.stream_out(ctx, route, _anthropic_errors(reply.events))


async def _anthropic_errors(events: AsyncGenerator[bytes, None]) -> AsyncGenerator[bytes, None]:
    """The events as they came, but Marina's own mid-stream error event
    (OpenAI-shaped, passthru/streaming.py) in Anthropic's shape."""
    try:
        async for event in events:
            if event.startswith(b'data: {"error"'):
                try:
                    error = json.loads(event[5:])["error"]
                except (ValueError, KeyError, TypeError):
                    error = {}
                payload = {"type": "error", "error": {"type": "api_error", "message": error.get("message", "")}}
                yield common.sse("error", payload)
                continue
            yield event
    finally:
        await events.aclose()
