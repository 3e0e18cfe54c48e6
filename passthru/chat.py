"""POST /v1/chat/completions: authenticate, validate, then pass through or
run a formation, and trace every request whatever its outcome."""
from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from django.conf import settings

from kernel import money
from kernel.conversation import identify
from kernel.redact import redact
from ledger.spend import services
from ledger.spend.records import TraceRecord
from passthru import auth, cors, crews, fallback, formations, ratelimit, spendcap, toolcalls
from passthru.calls import call_stream, encode
from passthru.context import Inbound, RequestContext
from passthru.errors import ApiError, UpstreamError, check_request_size, internal_error, retry_after
from passthru.formations import lessons, streamed
from passthru.formations.conversation import with_trailing_note
from passthru.providers import plan
from passthru.responses import SSE, Outbound, error_out
from passthru.schemas import (
    MAX_MODEL_CHARS,
    MAX_OUTPUT_TOKENS,
    OUTPUT_LIMIT_FIELDS,
    SURROGATES,
    TYPED_FIELDS,
    UNPRINTABLE,
)
from passthru.streaming import DONE

log = logging.getLogger(__name__)

# No answer went out: the status nginx and most gateways log for a client that
# closed the connection first.
CLIENT_CLOSED_REQUEST = 499
# passthru/schemas.py states the body rules (and says why each).
_UNPRINTABLE = re.compile(f"[{UNPRINTABLE}{SURROGATES}]")


async def chat_completions(inbound: Inbound) -> Outbound:
    """Answer one chat-completions request; its trace is committed before return
    (for streams: when the stream ends)."""
    ctx = RequestContext.for_request(inbound)
    try:
        caller = inbound.caller or await auth.authenticate(
            inbound.headers.get("authorization"), inbound.headers.get("x-marina-agent")
        )
        ctx.key_name = caller.key_name
        await ratelimit.check(ratelimit.client_of(caller.key_name if caller.keyed else None, inbound.peer, inbound.headers))
        body = parse_body(inbound.body)
        ctx.requested_model = body["model"]
        ctx.conversation = identify(body)  # seed and opening hashes, never content: links τ² items to traces
        ctx.stream = body.get("stream") is True
        if settings.MARINA_TRACE_BODIES:
            ctx.body = redact(body)
        if crews.is_crew_id(body["model"]):  # marina:<crew>: its model id and defaults, then as below
            body = await crews.apply(ctx, body)
        formation, model, lessons_prefix = formations.choose(body["model"], inbound.headers)
        if model != body["model"]:  # an `off` header or marina/lessons: stripped a prefix
            body = {**body, "model": model}
        if formation is not None:
            ctx.route = getattr(formation, "route_name", formation.name)
            if ctx.stream:  # the formation runs whole, then its answer goes out as SSE chunks
                out = streamed.as_stream(await formation.run(ctx, streamed.unstreamed(body)), body)
            else:
                out = await formation.run(ctx, body)
        else:
            ctx.route = "passthru"
            recalled = None
            if lessons_prefix or lessons.requested(inbound.headers) is not None:
                body, recalled = await _with_lessons(ctx, body, lessons_prefix)
            if ctx.stream:
                out = await _stream(ctx, body)
                if recalled is not None:
                    out.headers[lessons.HEADER] = recalled.header()
                return out
            out = await _plain(ctx, body)
            if recalled is not None:
                out.headers[lessons.HEADER] = recalled.header()
    except asyncio.CancelledError:
        # The client went away before the answer (Django's handlers cancel the
        # call): the request is still in the ledger.
        if not ctx.traced:
            _trace_after_drain(ctx, CLIENT_CLOSED_REQUEST, "The client disconnected before the answer.")
        raise
    except ApiError as exc:
        return await _answer_error(ctx, exc)
    except RecursionError:
        # json and the body walkers recurse: a body nested thousands deep is the client's error.
        return await _answer_error(ctx, ApiError(400, "The request body is nested too deeply.", code="invalid_json"))
    except Exception:
        # A bug, not the client's fault: still OpenAI's envelope, and still traced.
        log.exception("unexpected error answering %s", ctx.request_id)
        return await _answer_error(ctx, internal_error(ctx.request_id))
    await _finish(ctx, out)
    return out


async def _answer_error(ctx: RequestContext, exc: ApiError) -> Outbound:
    out = error_out(exc)
    kind = exc.trace_kind
    await _finish(ctx, out, error_kind=kind, error_message=exc.message)
    return out


async def refuse(inbound: Inbound, error: ApiError, headers: dict[str, str] | None = None) -> Outbound:
    """Answer a request turned away before it reaches a route (unknown path,
    wrong method, body too large): OpenAI's envelope, traced like any other."""
    ctx = RequestContext.for_request(inbound)
    out = error_out(error)
    out.headers.update(headers or {})
    await _finish(ctx, out, error_kind=error.code, error_message=error.message)
    return out


def parse_model_body(raw: bytes) -> dict[str, Any]:
    """A JSON object with a usable `model`, or 400/413 naming the offending `param`:
    the rules every door (passthru/doors/) shares with chat."""
    check_request_size(len(raw))
    try:
        # NaN and Infinity are not JSON (RFC 8259); json.loads would take them.
        body = json.loads(raw, parse_constant=_not_json)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "The request body is not valid JSON.", code="invalid_json") from None
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise ApiError(400, "'model' is required and must be a non-empty string.", param="model")
    if _UNPRINTABLE.search(model):
        raise ApiError(
            400, "'model' must not contain control characters, line separators or lone surrogates.", param="model"
        )
    if len(model) > MAX_MODEL_CHARS:
        raise ApiError(400, f"'model' must be at most {MAX_MODEL_CHARS} characters.", param="model")
    for name in OUTPUT_LIMIT_FIELDS:
        limit = body.get(name)
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > MAX_OUTPUT_TOKENS:
            raise ApiError(400, f"'{name}' must be at most {MAX_OUTPUT_TOKENS}.", param=name)
    return body


def parse_body(raw: bytes) -> dict[str, Any]:
    """The request body as a dict, or 400/413 naming the offending `param`."""
    body = parse_model_body(raw)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' is required and must be a non-empty array.", param="messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError(400, f"messages[{i}] must be an object with a string 'role'.", param=f"messages[{i}]")
    for name, (kind, label) in TYPED_FIELDS.items():
        value = body.get(name)
        if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
            raise ApiError(400, f"'{name}' must be {label}.", param=name)
    for i, tool in enumerate(body.get("tools") or ()):
        if not isinstance(tool, dict):
            raise ApiError(400, f"tools[{i}] must be an object.", param=f"tools[{i}]")
    return body


async def _with_lessons(ctx: RequestContext, body: dict[str, Any], prefix: bool) -> tuple[dict[str, Any], lessons.Recalled]:
    """A plain request that opted in: lessons for its opening request, in the trailing note."""
    mode = lessons.mode(ctx.inbound.headers, default="on" if prefix else "off")
    recalled = await lessons.recall(
        ctx, lessons.opening_request(body["messages"]), mode, query="opening", messages=body["messages"]
    )
    if recalled.injected:
        body = {**body, "messages": with_trailing_note(body["messages"], recalled.block())}
    return body, recalled


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


async def _plain(ctx: RequestContext, body: dict[str, Any]) -> Outbound:
    route, done = await fallback.call_first(ctx, plan(body["model"]), body)
    headers: dict[str, str] = {}
    if done.ok:
        headers["x-marina-upstream-model"] = route.served_id
        if done.usage.cost_nanousd is not None:
            headers["x-marina-cost-usd"] = money.plain(done.usage.cost_nanousd)
        if done.usage.cached_tokens:
            headers["x-marina-cache-read-tokens"] = str(done.usage.cached_tokens)
        if done.usage.cache_write_tokens:
            headers["x-marina-cache-write-tokens"] = str(done.usage.cache_write_tokens)
        # Text tool calls (`<tool_call>{…}</tool_call>`) become structured ones;
        # any other reply goes out byte for byte.
        if done.payload is not None and toolcalls.wanted(body) and toolcalls.normalise_reply(done.payload):
            return Outbound(done.status, headers, encode(done.payload), content_type="application/json")
    # The upstream's status and body as they came, errors included (credentials
    # redacted, Retry-After passed on: passthru/errors.py).
    headers.update(retry_after(done.retry_after))
    return Outbound(done.status, headers, done.body, content_type="application/json")


async def _stream(ctx: RequestContext, body: dict[str, Any]) -> Outbound:
    """The stream of the first route of the plan that serves it: a fallback
    plan passes over the routes that do not know the model or fail before the
    first byte (passthru/fallback.py), each attempt its own span."""
    routes = plan(body["model"])
    misses = fallback.Misses(routes, [])
    for route in routes.routes:
        try:
            reply = await call_stream(ctx, route, body)
        except UpstreamError as exc:
            if not routes.fallback:
                raise
            misses.add(route, fallback.describe_failure(exc))
            continue
        if reply.events is None:
            if routes.fallback and reply.status != 200 and fallback.outcome(reply.status, reply.body) != fallback.SERVED:
                misses.add(route, fallback.describe(reply.status, reply.body))
                continue
            # An error (or a provider that ignored stream=true): relay it whole;
            # call_stream has checked that it is JSON.
            out = Outbound(reply.status, retry_after(reply.retry_after), reply.body, content_type="application/json")
            await _finish(ctx, out, error_kind=reply.span.error_kind)
            return out
        headers = {"x-marina-upstream-model": route.served_id, "cache-control": "no-cache"}
        out = Outbound(200, headers, content_type=SSE)
        events = toolcalls.normalise_stream(reply.events) if toolcalls.wanted(body) else reply.events
        out.stream = relay_and_record(ctx, events, out, DONE)
        _common_headers(ctx, out)
        return out
    raise misses.exhausted()


async def relay_and_record(
    ctx: RequestContext, events: AsyncGenerator[bytes, None], out: Outbound, trailer: bytes = b""
) -> AsyncIterator[bytes]:
    """Yield the events, trace the request however the stream ended (finished,
    failed upstream, or cancelled by a client that went away), then `trailer`
    (chat's [DONE]; the other doors' streams have none) if it finished: a client
    that saw the end of the stream can already find its trace."""
    status, error_kind, error_message = "ok", "", ""
    try:
        async for event in events:
            yield event
    except UpstreamError as exc:
        status, error_kind, error_message = "error", exc.kind, exc.message
    except (asyncio.CancelledError, GeneratorExit):
        # Closing the events hands the upstream call to a bounded drain
        # (passthru/calls.py _drain) that reads it on and meters it; the trace
        # is written once that is over, with what it metered.
        await events.aclose()
        _trace_after_drain(ctx, out.status, "The client disconnected mid-stream.")
        raise
    ctx.traced = True
    await _record(ctx, ctx.trace(http_status=out.status, status=status, error_kind=error_kind, error_message=error_message))
    # [DONE] means "complete": after an upstream failure the error event is the
    # last word, so a client that skips error events still sees a broken stream.
    if status == "ok" and trailer:
        yield trailer


def _trace_after_drain(ctx: RequestContext, http_status: int, message: str) -> None:
    """Trace a request its client abandoned, once the upstream call it left
    running has been read on and metered (passthru/calls.py: the drains)."""
    ctx.traced = True  # one trace per request, whatever happens meanwhile
    draining = ctx.draining
    if draining is None or draining.done():
        _trace_disconnect(ctx, http_status, message)
    else:
        draining.add_done_callback(lambda _: _trace_disconnect(ctx, http_status, message))


def _trace_disconnect(ctx: RequestContext, http_status: int, message: str) -> None:
    """Trace a request its client abandoned; upstream calls it cut short are
    marked cancelled too. Not awaited: a cancelled task cannot wait; the
    writer thread commits it."""
    for span in ctx.spans:
        if span.http_status is None and span.status == "ok":
            span.status, span.error_kind = "cancelled", "client_disconnected"
    ctx.traced = True
    record = ctx.trace(http_status=http_status, status="cancelled", error_kind="client_disconnected", error_message=message)
    holds, spent = ctx.holds, record.upstream_cost_nanousd
    services.submit_record(record).add_done_callback(lambda _: spendcap.release(holds, spent))


async def _record(ctx: RequestContext, record: TraceRecord) -> None:
    """Commit the trace (awaited: exact on return), then drop the request's
    holds on the daily cap: its spend is in the ledger now. Released once the
    write is over, whether this task waits for it or is cancelled meanwhile."""
    written = services.submit_record(record)
    # The daily cap counts the spend in this process's lease until the lease is next sized.
    holds, spent = ctx.holds, record.upstream_cost_nanousd
    written.add_done_callback(lambda _: spendcap.release(holds, spent))
    try:
        await asyncio.wrap_future(written)
    except Exception:  # the ledger must never turn an answered call into a 500
        log.exception("could not record trace %s", ctx.request_id)


def _common_headers(ctx: RequestContext, out: Outbound) -> None:
    out.headers["x-request-id"] = ctx.request_id
    out.headers["x-marina-overhead-ms"] = f"{ctx.overhead_ms():.2f}"
    if settings.MARINA_CORS_ORIGINS:
        out.headers.update(cors.headers(ctx.inbound.headers))


async def _finish(ctx: RequestContext, out: Outbound, *, error_kind: str = "", error_message: str = "") -> None:
    """Stamp the common headers and commit the trace (awaited: exact on return)."""
    _common_headers(ctx, out)
    if out.status >= 400 and not error_kind:
        error_kind = next((s.error_kind for s in ctx.spans if s.error_kind), f"http_{out.status}")
    ctx.traced = True
    record = ctx.trace(
        http_status=out.status,
        status="ok" if out.status < 400 else "error",
        error_kind=error_kind,
        error_message=error_message,
    )
    await _record(ctx, record)
