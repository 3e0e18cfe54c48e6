"""POST /v1/chat/completions: authenticate, validate, then pass through or
run a formation, and trace every request whatever its outcome."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from django.conf import settings

from kernel import money
from kernel.conversation import identify
from kernel.redact import redact
from passthru import auth, crews, fallback, formations, ratelimit, toolcalls
from passthru.calls import call_stream, encode
from passthru.context import Inbound, RequestContext
from passthru.errors import ApiError, UpstreamError, internal_error, retry_after
from passthru.formations import lessons, streamed, usersim
from passthru.formations.conversation import with_trailing_note
from passthru.lifecycle import (
    CLIENT_CLOSED_REQUEST,
    common_headers,
    finish,
    parse_model_body,
    relay_and_record,
    trace_after_drain,
)
from passthru.outbound import SSE, Outbound, error_out
from passthru.providers import plan
from passthru.schemas import TYPED_FIELDS
from passthru.streaming import DONE

log = logging.getLogger(__name__)


def _chosen(body: dict[str, Any], headers: Mapping[str, str]) -> tuple[Any, str, bool]:
    """formations.choose, except for τ²'s user simulator: sent through a formation id, its tool calls are
    the customer's, never held to the agent's rules, nor its turns given lessons; it is answered by the
    model the id wraps (passthru/formations/usersim.py)."""
    formation, model, lessons_prefix = formations.choose(body["model"], headers)
    if (formation is not None or lessons_prefix) and usersim.is_tau2_user_simulator(body.get("messages")):
        return None, formations.answer_model(model), False
    return formation, model, lessons_prefix


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
        body = parse_body(inbound.take_body())
        ctx.requested_model = body["model"]
        ctx.conversation = identify(body)  # seed and opening hashes, never content: links τ² items to traces
        ctx.stream = body.get("stream") is True
        if settings.MARINA_TRACE_BODIES:
            ctx.body = redact(body)
        if crews.is_crew_id(body["model"]):  # marina:<crew>: its model id and defaults, then as below
            body = await crews.apply(ctx, body)
        formation, model, lessons_prefix = _chosen(body, inbound.headers)
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
                streaming = _stream(ctx, body)
                del body  # _stream lets go of it once the upstream has it (fallback.Bodies): so does this frame
                out = await streaming
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
            trace_after_drain(ctx, CLIENT_CLOSED_REQUEST, "The client disconnected before the answer.")
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
    await finish(ctx, out)
    return out


async def _answer_error(ctx: RequestContext, exc: ApiError) -> Outbound:
    out = error_out(exc)
    kind = exc.trace_kind
    await finish(ctx, out, error_kind=kind, error_message=exc.message)
    return out


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
    normalise = toolcalls.wanted(body)
    bodies = fallback.Bodies(body, routes)
    del body  # each attempt's comes from `bodies`, not held while the call waits for its first byte
    misses = fallback.Misses(routes, [])
    for route in routes.routes:
        try:
            reply = await call_stream(ctx, route, bodies.next())
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
            await finish(ctx, out, error_kind=reply.span.error_kind)
            return out
        headers = {"x-marina-upstream-model": route.served_id, "cache-control": "no-cache"}
        out = Outbound(200, headers, content_type=SSE)
        events = toolcalls.normalise_stream(reply.events) if normalise else reply.events
        out.stream = relay_and_record(ctx, events, out, DONE)
        common_headers(ctx, out)
        return out
    raise misses.exhausted()
