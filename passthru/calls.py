"""One upstream call, metered: the span, the tokens, the cost.

Formations use `call_json` for each of their steps, so every step of every
formation is traced and priced the same way as a plain passthru call.
`call_stream` is the same for a streamed call: the passthru uses it, and a
formation that streams would too."""
from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import orjson
from django.conf import settings

from ledger.spend.records import SpanRecord
from marina.redact import redact
from passthru import spendcap, upstream
from passthru.bodyprep import prepare
from passthru.context import RequestContext
from passthru.errors import ApiError, UpstreamError
from passthru.pricing import Usage, price, usage_from
from passthru.providers import Route
from passthru.responses import SSE
from passthru.streaming import Meter, relay_or_error, wants_usage, with_usage_requested


@dataclass
class Completion:
    """An upstream reply. `payload` is the parsed JSON for a 2xx reply."""

    status: int
    body: bytes
    payload: dict[str, Any] | None
    usage: Usage
    span: SpanRecord

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def encode(body: dict[str, Any]) -> bytes:
    """Compact UTF-8 JSON. orjson writes what json.dumps writes with these
    options (the same values; a small float's exponent may be spelled 1e-7
    rather than 1e-07) ~7x faster: 0.14 -> 0.02 ms for the τ²-sized body.
    What it refuses (integers beyond 64 bits, lone surrogates) goes through json."""
    try:
        return orjson.dumps(body)
    except TypeError:
        pass
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode()
    except UnicodeEncodeError:
        # A lone surrogate ("\ud800") is a valid JSON escape but not UTF-8:
        # send it escaped, the way the client wrote it.
        return json.dumps(body, separators=(",", ":")).encode()


def meter(span: SpanRecord, route: Route, usage: Usage) -> None:
    span.prompt_tokens = usage.prompt_tokens
    span.completion_tokens = usage.completion_tokens
    span.cached_tokens = usage.cached_tokens
    span.reasoning_tokens = usage.reasoning_tokens
    span.cost_nanousd = usage.cost_nanousd
    span.cost_source = usage.cost_source


def fail_span(span: SpanRecord, exc: ApiError) -> None:
    span.status = "error"
    span.error_kind = exc.kind if isinstance(exc, UpstreamError) else exc.code
    span.http_status = exc.status
    if span.error_kind == "pool_timeout":
        note_queued(span, settings.MARINA_UPSTREAM_POOL_TIMEOUT)


def note_queued(span: SpanRecord, seconds: float) -> None:
    """Time the call waited for a free connection to its provider (issue 20:
    past MARINA_UPSTREAM_MAX_CONNECTIONS calls queue, and the trace says so)."""
    if seconds > 0:
        span.detail["queued_ms"] = round(seconds * 1000, 1)


async def call_json(
    ctx: RequestContext, route: Route, body: dict[str, Any], *, name: str = "upstream", parent_seq: int | None = None
) -> Completion:
    """POST a non-streaming chat completion to `route`, recording its span.

    Upstream 4xx/5xx replies are returned (status and body as they came), not
    raised: the passthru relays them. Transport failures and a 2xx body that
    is not JSON raise UpstreamError."""
    await spendcap.check()
    body = prepare(route, body)  # the upstream id, and only the changes this provider needs
    span = ctx.open_span(name, parent_seq=parent_seq, provider=route.provider.name, upstream_model=route.upstream_model)
    if settings.MARINA_TRACE_BODIES:
        span.body = {"request": redact(body)}
    started = time.perf_counter()
    try:
        reply = await upstream.post_chat(route.provider, encode(body), ctx.upstream_headers())
    except UpstreamError as exc:
        fail_span(span, exc)
        raise
    finally:
        elapsed = time.perf_counter() - started
        ctx.upstream_seconds += elapsed
        span.duration_ms = elapsed * 1000
    span.http_status = reply.status
    note_queued(span, reply.queued)
    payload: dict[str, Any] | None = None
    usage = Usage()
    if 200 <= reply.status < 300:
        try:
            payload = json.loads(reply.body)
            if not isinstance(payload, dict):
                raise ValueError("not an object")
        except ValueError:
            error = UpstreamError(route.provider.name, "bad_json", f"Provider '{route.provider.name}' sent a reply that is not JSON.")
            fail_span(span, error)
            raise error from None
        usage = usage_from(payload.get("usage")) or Usage()
        price(usage, provider=route.provider.name, upstream_model=route.upstream_model, reported=payload.get("usage"))
        meter(span, route, usage)
        if settings.MARINA_TRACE_BODIES:
            span.body["response"] = redact(payload)
    else:
        span.status = "error"
        span.error_kind = f"http_{reply.status}"
    return Completion(reply.status, reply.body, payload, usage, span)


@dataclass
class StreamReply:
    """A streamed upstream reply. For a 200 event stream, `events` yields the
    events to pass on (metered; without the closing [DONE], which is the
    caller's to send once it has traced the request). Anything else (an
    error, or a provider that ignored stream=true) is read whole into `body`
    and `events` is None."""

    status: int
    content_type: str
    body: bytes
    events: AsyncGenerator[bytes, None] | None
    span: SpanRecord


async def call_stream(
    ctx: RequestContext, route: Route, body: dict[str, Any], *, name: str = "upstream", parent_seq: int | None = None
) -> StreamReply:
    """POST a streaming chat completion to `route`, recording its span.

    Usage is always asked of the provider (the call is priced from it); its
    usage-only chunk is kept from the caller unless the client asked for it.
    The span is closed (duration, tokens, cost) when `events` ends, fails
    upstream (status "error", the error event yielded before UpstreamError is
    re-raised) or is closed or cancelled early (status "cancelled"; the
    upstream response is closed at once)."""
    await spendcap.check()
    client_wants_usage = wants_usage(body)
    sent = prepare(route, body if client_wants_usage else with_usage_requested(body))
    span = ctx.open_span(name, parent_seq=parent_seq, provider=route.provider.name, upstream_model=route.upstream_model)
    if settings.MARINA_TRACE_BODIES:
        span.body = {"request": redact(sent)}
    meter = Meter(route, span, hide_usage_chunk=not client_wants_usage)
    stack = AsyncExitStack()
    try:
        stream = await stack.enter_async_context(upstream.open_stream(route.provider, encode(sent), ctx.upstream_headers()))
    except UpstreamError as exc:
        _stop_clock(ctx, meter)
        fail_span(span, exc)
        raise
    span.http_status = stream.status
    note_queued(span, stream.queued)
    if stream.status == 200 and stream.content_type.startswith(SSE):
        return StreamReply(200, SSE, b"", _metered_events(ctx, stack, stream, meter), span)
    async with stack:
        raw = await stream.read()
    _stop_clock(ctx, meter)
    if stream.status != 200:
        span.status, span.error_kind = "error", f"http_{stream.status}"
    return StreamReply(stream.status, stream.content_type, raw, None, span)


async def _metered_events(
    ctx: RequestContext, stack: AsyncExitStack, stream: upstream.Stream, meter: Meter
) -> AsyncGenerator[bytes, None]:
    try:
        async with stack:  # the upstream response is closed however this ends
            try:
                async for event in relay_or_error(stream.chunks(), meter):
                    yield event
            except UpstreamError as exc:
                meter.span.status, meter.span.error_kind = "error", exc.kind
                raise
            except (asyncio.CancelledError, GeneratorExit):
                meter.span.status, meter.span.error_kind = "cancelled", "client_disconnected"
                raise
    finally:
        _close_span(ctx, meter)


def _stop_clock(ctx: RequestContext, meter: Meter) -> None:
    elapsed = time.perf_counter() - meter.started
    ctx.upstream_seconds += elapsed
    meter.span.duration_ms = elapsed * 1000


def _close_span(ctx: RequestContext, meter: Meter) -> None:
    _stop_clock(ctx, meter)
    if meter.usage is not None:
        u, span = meter.usage, meter.span
        span.prompt_tokens, span.completion_tokens = u.prompt_tokens, u.completion_tokens
        span.cached_tokens, span.reasoning_tokens = u.cached_tokens, u.reasoning_tokens
        span.cost_nanousd, span.cost_source = u.cost_nanousd, u.cost_source
