"""A request's life on any door (passthru/doors/): the body rules every door
shares, the headers every answer carries, and the trace, committed however
the request ends (answered, refused, failed upstream, or abandoned by its
client), with the release of its holds on the daily cap once its spend is in
the ledger. One way to record a request, whichever door."""
from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from django.conf import settings

from ledger.spend import services
from ledger.spend.records import TraceRecord
from passthru import cors, spendcap
from passthru.context import Inbound, RequestContext
from passthru.errors import ApiError, UpstreamError, check_request_size
from passthru.outbound import Outbound, error_out
from passthru.schemas import MAX_MODEL_CHARS, MAX_OUTPUT_TOKENS, OUTPUT_LIMIT_FIELDS, SURROGATES, UNPRINTABLE

log = logging.getLogger(__name__)

# No answer went out: the status nginx and most gateways log for a client that
# closed the connection first.
CLIENT_CLOSED_REQUEST = 499
# passthru/schemas.py states the body rules (and says why each).
_UNPRINTABLE = re.compile(f"[{UNPRINTABLE}{SURROGATES}]")


async def refuse(inbound: Inbound, error: ApiError, headers: dict[str, str] | None = None) -> Outbound:
    """Answer a request turned away before it reaches a route (unknown path,
    wrong method, body too large): OpenAI's envelope, traced like any other."""
    ctx = RequestContext.for_request(inbound)
    out = error_out(error)
    out.headers.update(headers or {})
    await finish(ctx, out, error_kind=error.code, error_message=error.message)
    return out


def parse_model_body(raw: bytes) -> dict[str, Any]:
    """A JSON object with a usable `model`, or 400/413 naming the offending `param`:
    the rules every door (passthru/doors/) shares."""
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


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


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
        trace_after_drain(ctx, out.status, "The client disconnected mid-stream.")
        raise
    ctx.traced = True
    await record_trace(ctx, ctx.trace(http_status=out.status, status=status, error_kind=error_kind, error_message=error_message))
    # [DONE] means "complete": after an upstream failure the error event is the
    # last word, so a client that skips error events still sees a broken stream.
    if status == "ok" and trailer:
        yield trailer


def trace_after_drain(ctx: RequestContext, http_status: int, message: str) -> None:
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


async def record_trace(ctx: RequestContext, record: TraceRecord) -> None:
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


def common_headers(ctx: RequestContext, out: Outbound) -> None:
    out.headers["x-request-id"] = ctx.request_id
    out.headers["x-marina-overhead-ms"] = f"{ctx.overhead_ms():.2f}"
    if settings.MARINA_CORS_ORIGINS:
        out.headers.update(cors.headers(ctx.inbound.headers))


async def finish(ctx: RequestContext, out: Outbound, *, error_kind: str = "", error_message: str = "") -> None:
    """Stamp the common headers and commit the trace (awaited: exact on return)."""
    common_headers(ctx, out)
    if out.status >= 400 and not error_kind:
        error_kind = next((s.error_kind for s in ctx.spans if s.error_kind), f"http_{out.status}")
    ctx.traced = True
    record = ctx.trace(
        http_status=out.status,
        status="ok" if out.status < 400 else "error",
        error_kind=error_kind,
        error_message=error_message,
    )
    await record_trace(ctx, record)
