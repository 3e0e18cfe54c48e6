"""What the doors beside chat completions share: a request's life (the key,
the rate limit, the body, the trace, the answer in the door's own error
envelope) and the loop over a plan's routes, each attempt one metered,
traced upstream call through passthru/calls.py, as chat's are.

The trace, its commit and the release of the daily cap's holds are the
request lifecycle's (passthru/lifecycle.py), as chat's are: one way to record
a request, whichever door."""
from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any

import orjson
from django.conf import settings

from kernel import money
from kernel.redact import redact
from passthru import auth, crews, fallback, formations, lifecycle, ratelimit
from passthru.calls import Completion, StreamReply, call_json, call_stream, encode
from passthru.context import Inbound, RequestContext
from passthru.endpoints import Endpoint
from passthru.errors import ApiError, UpstreamError, internal_error, retry_after
from passthru.intake import key_header
from passthru.outbound import Outbound, error_out
from passthru.pricing import Usage
from passthru.providers import Plan, Route

log = logging.getLogger(__name__)

Envelope = Callable[[ApiError], Outbound]
Handler = Callable[[RequestContext, dict[str, Any]], Awaitable[Outbound]]
# What one route of a plan is sent, when that differs by route: the body and
# the upstream API (/v1/responses translates for providers without it).
Attempt = Callable[[Route], tuple[dict[str, Any], Endpoint]]


async def serve(inbound: Inbound, handle: Handler, *, envelope: Envelope = error_out) -> Outbound:
    """Answer one request of a door: `handle` gets the context and the parsed
    body; errors become `envelope`'s answer; the trace is committed before
    return (for streams: when the stream ends, see `lifecycle.relay_and_record`)."""
    ctx = RequestContext.for_request(inbound)
    try:
        caller = inbound.caller or await auth.authenticate(
            key_header(inbound.path, inbound.headers), inbound.headers.get("x-marina-agent")
        )
        ctx.key_name = caller.key_name
        await ratelimit.check(ratelimit.client_of(caller.key_name if caller.keyed else None, inbound.peer, inbound.headers))
        body = parse_body(inbound.take_body())
        ctx.requested_model = body["model"]
        ctx.stream = body.get("stream") is True
        if settings.MARINA_TRACE_BODIES:
            ctx.body = redact(body)
        out = await handle(ctx, body)
        if out.stream is not None:
            return out  # traced when it ends (lifecycle.relay_and_record)
    except asyncio.CancelledError:
        if not ctx.traced:
            lifecycle.trace_after_drain(ctx, lifecycle.CLIENT_CLOSED_REQUEST, "The client disconnected before the answer.")
        raise
    except ApiError as exc:
        return await answer_error(ctx, exc, envelope)
    except RecursionError:
        return await answer_error(
            ctx, ApiError(400, "The request body is nested too deeply.", code="invalid_json"), envelope
        )
    except Exception:
        log.exception("unexpected error answering %s", ctx.request_id)
        return await answer_error(ctx, internal_error(ctx.request_id), envelope)
    await lifecycle.finish(ctx, out)
    return out


async def answer_error(ctx: RequestContext, exc: ApiError, envelope: Envelope = error_out) -> Outbound:
    out = envelope(exc)
    await lifecycle.finish(ctx, out, error_kind=exc.trace_kind, error_message=exc.message)
    return out


async def refuse(inbound: Inbound, error: ApiError, envelope: Envelope, headers: dict[str, str] | None = None) -> Outbound:
    """A request turned away before its door read it (the key, the size, the method), traced."""
    ctx = RequestContext.for_request(inbound)
    out = envelope(error)
    out.headers.update(headers or {})
    await lifecycle.finish(ctx, out, error_kind=error.code, error_message=error.message)
    return out


def refuse_formations(model: str, headers: Mapping[str, str], door: str) -> None:
    """Formations, crews and lessons (`marina/…`, `marina:…`, or opted into by
    header) review and rewrite chat messages: they run on /v1/chat/completions.
    Here they are a 400 naming that door, before anything is sent."""
    if asks_for_formation(model, headers):
        raise ApiError(
            400,
            f"The model '{model}' asks for a formation, crew or lessons: those are served on "
            f"POST /v1/chat/completions, not on {door}.",
            code="formation_not_supported",
            param="model",
        )


def asks_for_formation(model: str, headers: Mapping[str, str]) -> bool:
    """Whether `model` (with these headers) names a formation, crew or lessons: chat's alone."""
    formation, inner, lessons = formations.choose(model, headers)
    return crews.is_crew_id(model) or formation is not None or lessons or inner != model


def parse_body(raw: bytes) -> dict[str, Any]:
    """The body as a dict with a usable `model` (the rules every door shares), or a 400/413 naming the param."""
    body = lifecycle.parse_model_body(raw)
    check_fields(body, stream="bool?")
    return body


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_fields(body: dict[str, Any], **kinds: str) -> None:
    """The 400 for a field the door's published schema (passthru/schemas.py)
    types otherwise, so that what the schema calls invalid never goes upstream.
    Kinds: str, int, bool, objects (an array of objects), null (absent or null allowed)."""
    for name, kind in kinds.items():
        value = body.get(name)
        optional = kind.endswith("?")
        kind = kind.rstrip("?")
        if value is None:
            if optional:
                continue
            raise ApiError(400, f"'{name}' is required.", param=name)
        ok = {
            "str": isinstance(value, str),
            "int": is_int(value),
            "bool": isinstance(value, bool),
            "objects": isinstance(value, list) and all(isinstance(v, dict) for v in value),
            "str|objects": isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, dict) for v in value)),
        }[kind]
        if not ok:
            what = {"str": "a string", "int": "an integer", "bool": "a boolean", "objects": "an array of objects",
                    "str|objects": "a string or an array of objects"}[kind]
            raise ApiError(400, f"'{name}' must be {what}.", param=name)


def usage_headers(route: Route, usage: Usage) -> dict[str, str]:
    """What chat's answers say of the call, for the other doors' too."""
    headers = {"x-marina-upstream-model": route.served_id}
    if usage.cost_nanousd is not None:
        headers["x-marina-cost-usd"] = money.plain(usage.cost_nanousd)
    if usage.cached_tokens:
        headers["x-marina-cache-read-tokens"] = str(usage.cached_tokens)
    if usage.cache_write_tokens:
        headers["x-marina-cache-write-tokens"] = str(usage.cache_write_tokens)
    return headers


async def first_json(
    ctx: RequestContext, plan: Plan, body: dict[str, Any], endpoint: Endpoint, *, attempt: Attempt | None = None
) -> tuple[Route, Completion]:
    """A plain call served by the first route of `plan` that serves it
    (passthru/fallback.py's rules); each route gets `body` at `endpoint`, or what `attempt` says."""
    attempt = attempt or (lambda route: (body, endpoint))
    if not plan.fallback:
        route = plan.routes[0]
        sent, api = attempt(route)
        return route, await call_json(ctx, route, sent, endpoint=api)
    misses = fallback.Misses(plan, [])
    for route in plan.routes:
        sent, api = attempt(route)
        try:
            done = await call_json(ctx, route, sent, endpoint=api)
        except UpstreamError as exc:
            misses.add(route, fallback.describe_failure(exc))
            continue
        if fallback.outcome(done.status, done.body) == fallback.SERVED:
            return route, done
        misses.add(route, fallback.describe(done.status, done.body))
    raise misses.exhausted()


def plain_out(route: Route, done: Completion, body: bytes | None = None) -> Outbound:
    """The upstream's answer as it came (errors included, with their Retry-After), or `body` in its place."""
    headers = usage_headers(route, done.usage) if done.ok else retry_after(done.retry_after)
    return Outbound(done.status, headers, done.body if body is None else body, content_type="application/json")


async def first_stream(
    ctx: RequestContext, plan: Plan, body: dict[str, Any], endpoint: Endpoint, *, attempt: Attempt | None = None
) -> tuple[Route, StreamReply]:
    """The stream of the first route that serves it, as chat's (passthru/doors/chat.py `_stream`).
    A reply with no events (an error, or JSON for a stream) is the last route's, or a final answer."""
    attempt = attempt or (lambda route: (body, endpoint))
    misses = fallback.Misses(plan, [])
    for route in plan.routes:
        sent, api = attempt(route)
        try:
            reply = await call_stream(ctx, route, sent, endpoint=api)
        except UpstreamError as exc:
            if not plan.fallback:
                raise
            misses.add(route, fallback.describe_failure(exc))
            continue
        if (
            reply.events is None
            and plan.fallback
            and reply.status != 200
            and fallback.outcome(reply.status, reply.body) != fallback.SERVED
        ):
            misses.add(route, fallback.describe(reply.status, reply.body))
            continue
        return route, reply
    raise misses.exhausted()


async def relayed_error(ctx: RequestContext, reply: StreamReply) -> Outbound:
    """A stream answered with JSON (an error): relayed whole with its Retry-After, traced now."""
    out = Outbound(reply.status, retry_after(reply.retry_after), reply.body, content_type="application/json")
    await lifecycle.finish(ctx, out, error_kind=reply.span.error_kind)
    return out


def stream_out(ctx: RequestContext, route: Route, events: AsyncGenerator[bytes, None], trailer: bytes = b"") -> Outbound:
    out = Outbound(200, {"x-marina-upstream-model": route.served_id, "cache-control": "no-cache"}, content_type="text/event-stream")
    out.stream = lifecycle.relay_and_record(ctx, events, out, trailer)
    lifecycle.common_headers(ctx, out)
    return out


def sse(event: str, payload: dict[str, Any]) -> bytes:
    """One named server-sent event (Responses and Anthropic streams name theirs)."""
    return b"event: " + event.encode() + b"\ndata: " + encode(payload) + b"\n\n"


def loads(data: bytes) -> Any:
    """JSON from an upstream event: orjson (several times faster on every
    chunk of a translated stream), json for what orjson refuses (a lone
    surrogate escape); ValueError if it is not JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def event_data(event: bytes) -> bytes | None:
    """The `data:` of one SSE event (its first data line), or None."""
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            return line[5:].strip()
    return None
