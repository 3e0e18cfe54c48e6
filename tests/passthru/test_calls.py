"""passthru.calls.call_stream on its own, the way a formation that streams
would call it: a real streamed call to the scripted upstream, and the span it
leaves behind however the stream ends."""
from __future__ import annotations

import asyncio
import gc
import json
import time
from typing import Any

import pytest

from passthru.calls import StreamReply, call_stream
from passthru.context import Inbound, RequestContext
from passthru.errors import UpstreamError
from passthru.providers import resolve
from passthru.streaming import Pump
from tests.upstream import Reply, Sse, completion, sse_chunks

MODEL = "openrouter/openai/gpt-5.2"
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture
def streaming(marina_config, upstream):
    settings = marina_config
    settings.MARINA_DAILY_SPEND_CAP_USD = None  # no spend read: no database in these calls
    return upstream


def _run(body: dict[str, Any], take: int | None = None) -> tuple[RequestContext, StreamReply, list[bytes], Exception | None]:
    """Open the call and read its events (all of them, or the first `take`
    and then close them, as a client that hangs up does), in one event loop;
    then wait for the drain of an abandoned stream, if any."""

    async def go() -> tuple[RequestContext, StreamReply, list[bytes], Exception | None]:
        ctx = RequestContext.for_request(Inbound("POST", "/v1/chat/completions", {}, b""))
        reply = await call_stream(ctx, resolve(MODEL), body)
        events: list[bytes] = []
        failure: Exception | None = None
        if reply.events is not None:
            try:
                async for event in reply.events:
                    events.append(event)
                    if take is not None and len(events) == take:
                        await reply.events.aclose()
                        break
            except UpstreamError as exc:
                failure = exc
        if ctx.draining is not None:
            await ctx.draining
        return ctx, reply, events, failure

    return asyncio.run(go())


def test_a_finished_stream_is_metered_and_the_usage_chunk_kept_back(streaming):
    streaming.script(Sse(usage={"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17, "cost": 0.0021}))
    ctx, reply, events, failure = _run({"model": MODEL, "messages": HELLO, "stream": True})
    assert failure is None and reply.status == 200 and events
    assert streaming.requests[0].body["stream_options"] == {"include_usage": True}  # asked for the meter
    assert all(b'"usage"' not in e and b"[DONE]" not in e for e in events)  # the client did not ask; [DONE] is the caller's
    text = "".join(json.loads(e[5:])["choices"][0]["delta"].get("content", "") for e in events)
    assert text == "Hello there, streamed."
    span = reply.span
    assert ctx.spans == [span] and (span.status, span.http_status, span.error_kind) == ("ok", 200, "")
    assert (span.prompt_tokens, span.completion_tokens, span.cost_nanousd) == (12, 5, 2_100_000)
    assert span.duration_ms is not None and span.duration_ms > 0 and span.ttft_ms is not None
    assert ctx.upstream_seconds * 1000 == pytest.approx(span.duration_ms)


def test_the_usage_chunk_is_passed_on_when_the_client_asked(streaming):
    body = {"model": MODEL, "messages": HELLO, "stream": True, "stream_options": {"include_usage": True}}
    _ctx, reply, events, _failure = _run(body)
    assert any(b'"usage"' in e for e in events) and reply.span.prompt_tokens == 12


def test_a_stream_failing_midway_ends_with_an_error_event_and_a_failed_span(streaming):
    streaming.script(Sse(reset_after=2))
    _ctx, reply, events, failure = _run({"model": MODEL, "messages": HELLO, "stream": True})
    assert isinstance(failure, UpstreamError) and failure.kind == "reset"
    assert json.loads(events[-1][5:])["error"]["code"] == "upstream_error"
    assert (reply.span.status, reply.span.error_kind, reply.span.http_status) == ("error", "reset", 200)
    assert reply.span.duration_ms is not None


def test_a_stream_closed_early_cancels_the_span_and_the_upstream_call(streaming, settings):
    settings.MARINA_DRAIN_AFTER_DISCONNECT_SECONDS = 0  # hang up at once
    # Many small chunks apart: the upstream is still writing when the events are closed.
    streaming.script(Sse(chunks=sse_chunks("x" * 200, pieces=200), gap=0.02))
    _ctx, reply, events, failure = _run({"model": MODEL, "messages": HELLO, "stream": True}, take=1)
    assert failure is None and len(events) == 1
    assert (reply.span.status, reply.span.error_kind) == ("cancelled", "client_disconnected")
    assert reply.span.duration_ms is not None and reply.span.cost_nanousd is None
    # The upstream connection was closed, not left to run: its writes fail.
    deadline = time.monotonic() + 10
    while streaming.requests[0].outcome == "pending" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert streaming.requests[0].outcome == "client_gone"


def _finished(chunk: bytes) -> bool:
    choices = json.loads(chunk[5:])["choices"]
    return bool(choices) and choices[0].get("finish_reason") is not None


def test_a_client_gone_before_the_usage_chunk_is_still_charged(streaming):
    """Issue 10 item 3: the client has the whole answer (the finish chunk) and
    leaves before the usage chunk; the upstream is read on and the call priced."""
    chunks = sse_chunks("Hello there, streamed.")
    usage = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17, "cost": 0.0034}
    streaming.script(Sse(chunks=chunks, usage=usage, usage_delay=0.3))
    _ctx, reply, events, failure = _run({"model": MODEL, "messages": HELLO, "stream": True}, take=len(chunks))
    assert failure is None and _finished(events[-1])  # the client saw the end of the answer
    span = reply.span
    assert (span.status, span.error_kind, span.cost_nanousd, span.completion_tokens) == ("ok", "", 3_400_000, 5)
    assert streaming.requests[0].outcome == "complete"  # read to its end, not cut
    assert span.duration_ms is not None and span.duration_ms >= 300


def test_the_drain_after_a_client_left_is_bounded(streaming, settings):
    """A stream that goes on past MARINA_DRAIN_AFTER_DISCONNECT_SECONDS is cut
    there: Marina hangs up on the upstream and the span says cancelled."""
    settings.MARINA_DRAIN_AFTER_DISCONNECT_SECONDS = 0.5
    streaming.script(Sse(chunks=sse_chunks("x" * 200, pieces=200), gap=0.02))  # ~4 s
    started = time.monotonic()
    _ctx, reply, events, _failure = _run({"model": MODEL, "messages": HELLO, "stream": True}, take=1)
    drained = time.monotonic() - started
    assert (reply.span.status, reply.span.error_kind, reply.span.cost_nanousd) == ("cancelled", "client_disconnected", None)
    assert 0.5 <= drained < 3
    deadline = time.monotonic() + 10
    while streaming.requests[0].outcome == "pending" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert streaming.requests[0].outcome == "client_gone"


def test_a_stream_that_fails_after_its_client_left_leaves_no_cycle(streaming):
    """The drain reads the pump's error and lets it go: its traceback holds the
    pump's frames, so kept it made a cycle only the collector frees, and a
    worker runs none of its own accord (kernel/collector.py)."""
    streaming.script(Sse(gap=0.05, reset_after=3))
    gc.collect()
    gc.disable()
    try:
        _ctx, reply, events, _failure = _run({"model": MODEL, "messages": HELLO, "stream": True}, take=1)
        pumps = [o for o in gc.get_objects() if isinstance(o, Pump)]
    finally:
        gc.enable()
    assert len(events) == 1
    assert (reply.span.status, reply.span.error_kind) == ("error", "reset")
    assert pumps == []


def test_an_error_reply_is_read_whole_and_not_streamed(streaming):
    streaming.script(Reply(json={"error": {"message": "boom"}}, status=500))
    _ctx, reply, events, _failure = _run({"model": MODEL, "messages": HELLO, "stream": True})
    assert reply.events is None and events == []
    assert (reply.status, json.loads(reply.body)) == (500, {"error": {"message": "boom"}})
    assert (reply.span.status, reply.span.error_kind, reply.span.http_status) == ("error", "http_500", 500)


def test_a_provider_that_ignores_stream_true_is_relayed_whole(streaming):
    streaming.script(Reply(json=completion("plain")))
    _ctx, reply, _events, _failure = _run({"model": MODEL, "messages": HELLO, "stream": True})
    assert reply.events is None and reply.status == 200 and json.loads(reply.body)["choices"][0]["message"]["content"] == "plain"
    assert reply.span.status == "ok" and reply.span.error_kind == ""
