"""One upstream call, metered: the span, the tokens, the cost.

Formations use `call_json` for each of their steps, so every step of every
formation is traced and priced the same way as a plain passthru call.
`call_stream` is the same for a streamed call: the passthru uses it, and a
formation that streams would too."""
from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, Coroutine
from dataclasses import dataclass
from typing import Any

import orjson
from django.conf import settings

from kernel.redact import redact
from ledger.spend.records import SpanRecord
from passthru import spendcap, upstream
from passthru.context import RequestContext
from passthru.endpoints import CHAT, Endpoint
from passthru.errors import ApiError, UpstreamError, bad_upstream_response, relayed_error
from passthru.outbound import SSE
from passthru.pricing import Usage
from passthru.providers import Route
from passthru.streaming import Meter, Pump, relay, wants_usage, with_usage_requested


@dataclass
class Completion:
    """An upstream reply. `payload` is the parsed JSON for a 2xx reply."""

    status: int
    body: bytes
    payload: dict[str, Any] | None
    usage: Usage
    span: SpanRecord
    retry_after: str = ""  # an error reply's Retry-After, to pass on

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


async def _hold(ctx: RequestContext, route: Route, body: dict[str, Any], data: bytes) -> None:
    """The daily cap, with this call's estimated cost held against it until the
    request's trace (and so its spend) is recorded (passthru/lifecycle.py releases it)."""
    hold = await spendcap.hold(route.provider.name, route.upstream_model, body, len(data))
    if hold is not None:
        ctx.holds.append(hold)


def meter(span: SpanRecord, route: Route, usage: Usage) -> None:
    span.prompt_tokens = usage.prompt_tokens
    span.completion_tokens = usage.completion_tokens
    span.cached_tokens = usage.cached_tokens
    span.reasoning_tokens = usage.reasoning_tokens
    span.cost_nanousd = usage.cost_nanousd
    span.cost_source = usage.cost_source
    if usage.cache_write_tokens:  # no column of its own: the span's detail
        span.detail["cache_write_tokens"] = usage.cache_write_tokens
    flag_rejected(span, usage)


def flag_rejected(span: SpanRecord, usage: Usage) -> None:
    """Name on the span what the provider reported and was not believed (passthru/pricing.py)."""
    if usage.rejected:
        span.detail["usage_rejected"] = list(usage.rejected)


def _is_json(body: bytes) -> bool:
    try:
        json.loads(body)
    except ValueError:
        return False
    return True


def _unusable(span: SpanRecord, route: Route, status: int, content_type: str) -> UpstreamError:
    """Mark the span and make the 502 for a reply that is not JSON; the span
    keeps the status the provider sent."""
    span.status, span.error_kind, span.http_status = "error", "bad_json", status
    return bad_upstream_response(route.provider.name, status, content_type)


def fail_span(span: SpanRecord, exc: ApiError) -> None:
    span.status = "error"
    span.error_kind = exc.trace_kind
    span.http_status = exc.status
    if span.error_kind == "pool_timeout":
        note_queued(span, settings.MARINA_UPSTREAM_POOL_TIMEOUT)


def note_queued(span: SpanRecord, seconds: float) -> None:
    """Time the call waited for a free connection to its provider (issue 20:
    past MARINA_UPSTREAM_MAX_CONNECTIONS calls queue, and the trace says so)."""
    if seconds > 0:
        span.detail["queued_ms"] = round(seconds * 1000, 1)


async def call_json(
    ctx: RequestContext,
    route: Route,
    body: dict[str, Any],
    *,
    name: str = "upstream",
    parent_seq: int | None = None,
    endpoint: Endpoint = CHAT,
) -> Completion:
    """POST a non-streaming chat completion (or `endpoint`'s request) to `route`, recording its span.

    Upstream 4xx/5xx replies are returned (status and body as they came), not
    raised: the passthru relays them. Transport failures and a 2xx body that
    is not JSON raise UpstreamError."""
    body = endpoint.prepare(route, body)  # the upstream id, and only the changes this provider needs
    data = encode(body)
    await _hold(ctx, route, endpoint.cap_view(body) if endpoint.cap_view else body, data)
    span = ctx.open_span(name, parent_seq=parent_seq, provider=route.provider.name, upstream_model=route.upstream_model)
    if settings.MARINA_TRACE_BODIES:
        span.body = {"request": redact(body)}
    started = time.perf_counter()
    # The call runs in a task of its own: a client that leaves cancels the
    # request's task, not this one, so the call can end and be metered (`_drain_reply`).
    call = asyncio.ensure_future(upstream.post_chat(route.provider, data, ctx.upstream_headers(), endpoint.path))
    try:
        reply = await asyncio.shield(call)
    except UpstreamError as exc:
        _time_span(ctx, span, started)
        fail_span(span, exc)
        # The finished task holds this error, whose traceback holds this frame:
        # let go of the task, or the request (body, context) waits for the collector.
        del call
        raise
    except asyncio.CancelledError:
        ctx.draining = _drain_later(_drain_reply(ctx, call, route, span, started, endpoint))
        raise
    _time_span(ctx, span, started)
    return _completed(route, span, reply, endpoint)


def _time_span(ctx: RequestContext, span: SpanRecord, started: float) -> None:
    elapsed = time.perf_counter() - started
    ctx.upstream_seconds += elapsed
    span.duration_ms = elapsed * 1000


def _completed(route: Route, span: SpanRecord, reply: upstream.Reply, endpoint: Endpoint = CHAT) -> Completion:
    """The reply parsed and priced, its span filled in."""
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
            raise _unusable(span, route, reply.status, reply.content_type) from None
        usage = endpoint.usage(route, payload)
        meter(span, route, usage)
        if settings.MARINA_TRACE_BODIES:
            span.body["response"] = redact(payload)
    else:
        if not _is_json(reply.body):
            raise _unusable(span, route, reply.status, reply.content_type)
        span.status = "error"
        span.error_kind = f"http_{reply.status}"
        return Completion(reply.status, relayed_error(reply.body), None, usage, span, reply.retry_after)
    return Completion(reply.status, reply.body, payload, usage, span)


async def _drain_reply(
    ctx: RequestContext,
    call: asyncio.Future[upstream.Reply],
    route: Route,
    span: SpanRecord,
    started: float,
    endpoint: Endpoint = CHAT,
) -> None:
    """A plain call whose client left: let it end, for at most
    MARINA_DRAIN_AFTER_DISCONNECT_SECONDS, and meter its reply (the provider
    bills it); past the bound, hang up (span `cancelled`)."""
    try:
        seconds = settings.MARINA_DRAIN_AFTER_DISCONNECT_SECONDS
        if seconds > 0 and not call.done():
            await asyncio.wait([call], timeout=seconds)
    finally:
        if not call.done():
            call.cancel()  # closes the upstream connection
            await asyncio.wait([call])
        failure = None if call.cancelled() else call.exception()
        if call.cancelled():
            span.status, span.error_kind = "cancelled", "client_disconnected"
        elif isinstance(failure, UpstreamError):
            fail_span(span, failure)
        elif failure is None:
            try:
                _completed(route, span, call.result(), endpoint)
            except UpstreamError:
                pass  # the span says bad_json
        _time_span(ctx, span, started)


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
    retry_after: str = ""  # an error reply's Retry-After, to pass on


async def call_stream(
    ctx: RequestContext,
    route: Route,
    body: dict[str, Any],
    *,
    name: str = "upstream",
    parent_seq: int | None = None,
    endpoint: Endpoint = CHAT,
) -> StreamReply:
    """POST a streaming chat completion (or `endpoint`'s request) to `route`, recording its span.

    Usage is always asked of the provider (the call is priced from it); its
    usage-only chunk is kept from the caller unless the client asked for it.
    The span is closed (duration, tokens, cost) when `events` ends, fails
    upstream (status "error", the error event yielded before UpstreamError is
    re-raised) or is closed or cancelled early: then the upstream is read on
    in the background, metered, for MARINA_DRAIN_AFTER_DISCONNECT_SECONDS at
    most (`_drain`), and `ctx.draining` is the task to wait on before tracing."""
    client_wants_usage = not endpoint.asks_for_usage or wants_usage(body)
    sent = endpoint.prepare(route, body if client_wants_usage else with_usage_requested(body))
    data = encode(sent)
    await _hold(ctx, route, endpoint.cap_view(sent) if endpoint.cap_view else sent, data)
    span = ctx.open_span(name, parent_seq=parent_seq, provider=route.provider.name, upstream_model=route.upstream_model)
    if settings.MARINA_TRACE_BODIES:
        span.body = {"request": redact(sent)}
    meter = endpoint.meter(route, span, not client_wants_usage)
    stream = upstream.open_stream(route.provider, data, ctx.upstream_headers(), endpoint.path)
    # The stream holds the bytes until the provider has them, then lets go
    # (passthru/upstream.py): nor does this call keep them, or the dicts they
    # were made from, while it waits for the first byte, minutes maybe, with
    # thousands of calls waiting (docs/performance.md, issue 45).
    del body, sent, data
    try:
        await stream.open()
    except UpstreamError as exc:
        _stop_clock(ctx, meter)
        fail_span(span, exc)
        raise
    span.http_status = stream.status
    note_queued(span, stream.queued)
    if stream.status == 200 and stream.content_type.startswith(SSE):
        return StreamReply(200, SSE, b"", _metered_events(ctx, stream, meter), span)
    try:
        raw = await stream.read()
    finally:
        await stream.aclose()
    _stop_clock(ctx, meter)
    if not _is_json(raw):  # an HTML page, as an error or as a "successful" answer to a stream
        raise _unusable(span, route, stream.status, stream.content_type)
    if stream.status != 200:
        span.status, span.error_kind = "error", f"http_{stream.status}"
        return StreamReply(stream.status, stream.content_type, relayed_error(raw), None, span, stream.retry_after)
    return StreamReply(stream.status, stream.content_type, raw, None, span)


async def _metered_events(
    ctx: RequestContext, stream: upstream.Stream, meter: Meter
) -> AsyncGenerator[bytes, None]:
    pump = Pump(relay(stream.chunks(), meter))
    handed_over = False
    try:
        try:
            while (event := await pump.next()) is not None:
                yield event
        except UpstreamError as exc:
            meter.span.status, meter.span.error_kind = "error", exc.kind
            raise
        except (asyncio.CancelledError, GeneratorExit):
            # The client went away: the upstream is read on (and metered) for
            # a bounded time in the background, which then closes it and the span.
            pump.discard()
            ctx.draining = _drain_later(_drain(ctx, stream, pump, meter))
            handed_over = True
            raise
    finally:
        if not handed_over:
            pump.task.cancel()  # nothing if it has ended
            await stream.aclose()  # the upstream response is closed however this ends
            _close_span(ctx, meter)


# Drains in progress: the event loop keeps only weak references to tasks.
_draining: set[asyncio.Task[None]] = set()


async def drains_finished() -> None:
    """Wait for the drains in progress to end (each within its bound) and
    their traces to be queued: a worker that stops calls it last."""
    while _draining:
        await asyncio.wait(list(_draining))


def _drain_later(drain: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    task = asyncio.get_running_loop().create_task(drain)
    _draining.add(task)
    task.add_done_callback(_draining.discard)
    return task


async def _drain(ctx: RequestContext, stream: upstream.Stream, pump: Pump, meter: Meter) -> None:
    """Read a stream its client abandoned to its end, for at most
    MARINA_DRAIN_AFTER_DISCONNECT_SECONDS, so that the usage the provider
    reports last (and bills) is metered; past the bound, hang up.

    The span then says what became of the upstream call: `ok` (read to its
    end, priced), `error` (it failed meanwhile) or `cancelled`
    `client_disconnected` (cut at the bound, or a drain of 0)."""
    span = meter.span
    try:
        seconds = settings.MARINA_DRAIN_AFTER_DISCONNECT_SECONDS
        if seconds > 0 and not pump.task.done():
            await asyncio.wait([pump.task], timeout=seconds)
    finally:
        if not pump.task.done():
            pump.task.cancel()
            span.status, span.error_kind = "cancelled", "client_disconnected"
        elif pump.error is not None and isinstance(error := pump.take_error(), UpstreamError):
            span.status, span.error_kind = "error", error.kind
        try:
            await asyncio.wait([pump.task])  # its cancellation closes the upstream connection
        finally:
            await stream.aclose()
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
        if u.cache_write_tokens:
            span.detail["cache_write_tokens"] = u.cache_write_tokens
        flag_rejected(span, u)
