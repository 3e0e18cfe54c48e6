"""passthru/wire.py, the lean HTTP/1.1 transport, against the scripted
upstream on loopback: framing, keep-alive, timeouts and failures, each raised
as the httpx exception passthru/upstream.py maps to an error kind."""
from __future__ import annotations

import asyncio
import gc
import json
import socket
import time
import weakref
from collections.abc import Awaitable
from typing import Any

import httpx
import pytest

from passthru.wire import Answer, LeanTransport, Target
from tests.passthru.conftest import Raw, raw_reply
from tests.upstream import Reply, Reset, Sse, completion


def _request(base_url: str, body: dict[str, Any], read: float = 5.0) -> httpx.Request:
    return httpx.Request(
        "POST",
        f"{base_url}/chat/completions",
        json=body,
        extensions={"timeout": httpx.Timeout(10, read=read).as_dict()},
    )


async def _exchange(transport: LeanTransport, request: httpx.Request) -> tuple[httpx.Response, bytes]:
    response = await transport.handle_async_request(request)
    try:
        return response, await response.aread()
    finally:
        await response.aclose()


async def _pool_after_cancelling(transport: LeanTransport, wait: Awaitable[Any], after: float) -> tuple[int, int]:
    """Cancel a wait for an answer `after` seconds: the pool's (active, idle) connections then."""
    waiting = asyncio.ensure_future(wait)
    await asyncio.sleep(after)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    pool = next(iter(transport._pools.values()))
    return pool.active, len(pool.idle)


def _run(coro):
    return asyncio.run(coro)


def test_content_length_reply_and_keep_alive(upstream):
    async def go() -> tuple[list[int], int]:
        transport = LeanTransport()
        statuses = []
        for _ in range(3):
            response, body = await _exchange(transport, _request(upstream.base_url, {"model": "m"}))
            statuses.append(response.status_code)
            assert json.loads(body)["object"] == "chat.completion"
        pool = next(iter(transport._pools.values()))
        idle = len(pool.idle)
        await transport.aclose()
        return statuses, idle

    statuses, idle = _run(go())
    assert statuses == [200, 200, 200] and idle == 1  # one connection, reused
    assert upstream.requests[0].body == {"model": "m"}


def test_sse_until_close_body_arrives_in_events(upstream):
    upstream.script(Sse(gap=0.05))

    async def go() -> list[bytes]:
        transport = LeanTransport()
        response = await transport.handle_async_request(_request(upstream.base_url, {"model": "m", "stream": True}))
        assert response.headers["content-type"] == "text/event-stream"
        pieces = [chunk async for chunk in response.aiter_raw()]
        await response.aclose()
        return pieces

    pieces = _run(go())
    assert len(pieces) > 3, "events must come as they are sent, not all at the end"
    assert b"".join(pieces).endswith(b"data: [DONE]\n\n")


def test_a_closed_connection_is_freed_without_the_garbage_collector(upstream):
    # Its parser holds its callbacks and its read deadline one of its methods: cycles that left
    # every stream's connection, transport and request context to the cyclic collector, which
    # found 18 such objects a stream after a burst of 10,000 (docs/performance.md).
    upstream.script(Sse(gap=0.01))

    async def go() -> tuple[bool, bool]:
        transport = LeanTransport()
        response = await transport.handle_async_request(_request(upstream.base_url, {"model": "m", "stream": True}))
        pool = next(iter(transport._pools.values()))
        pieces = [chunk async for chunk in response.aiter_raw()]  # until the upstream closes: not kept
        assert b"".join(pieces).endswith(b"data: [DONE]\n\n")
        await response.aclose()
        assert not pool.idle
        conn = response.stream.conn  # type: ignore[union-attr]
        gone = weakref.ref(conn)
        del conn, response
        await asyncio.sleep(0.05)  # the transport's connection_lost
        return gone() is None, pool.active == 0

    gc.disable()
    try:
        freed, released = _run(go())
    finally:
        gc.enable()
    assert released
    assert freed, "a closed connection must not wait for the cyclic garbage collector"


def test_error_status_and_raw_body_pass_through(upstream):
    upstream.script(Reply(raw=b"<html>busy</html>", status=503, content_type="text/html"))
    response, body = _run(_exchange(LeanTransport(), _request(upstream.base_url, {"model": "m"})))
    assert (response.status_code, body, response.headers["content-type"]) == (503, b"<html>busy</html>", "text/html")


def test_slow_first_byte_is_a_read_timeout(upstream):
    upstream.script(Reply(json=completion("late"), delay=1.0))
    started = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        _run(_exchange(LeanTransport(), _request(upstream.base_url, {"model": "m"}, read=0.3)))
    assert 0.25 < time.monotonic() - started < 0.9


def test_stall_mid_stream_is_a_read_timeout_after_the_events_sent(upstream):
    upstream.script(Sse(stall_after=2, stall_seconds=2))

    async def go() -> tuple[bytes, type[BaseException] | None]:
        transport = LeanTransport()
        response = await transport.handle_async_request(_request(upstream.base_url, {"model": "m", "stream": True}, read=0.3))
        got = b""
        try:
            async for chunk in response.aiter_raw():
                got += chunk
        except httpx.HTTPError as exc:
            return got, type(exc)
        finally:
            await response.aclose()
        return got, None

    got, error = _run(go())
    assert error is httpx.ReadTimeout
    assert got.count(b"data: ") == 2


def test_a_slow_steady_stream_is_not_a_timeout(upstream):
    """The read timeout bounds each wait for data, not the whole stream."""
    upstream.script(Sse(gap=0.15))  # 6+ events over ~1 s, each within 0.4 s

    async def go() -> bytes:
        transport = LeanTransport()
        response = await transport.handle_async_request(_request(upstream.base_url, {"model": "m", "stream": True}, read=0.4))
        try:
            return b"".join([chunk async for chunk in response.aiter_raw()])
        finally:
            await response.aclose()

    assert _run(go()).endswith(b"data: [DONE]\n\n")


def test_reset_before_and_during_the_body(upstream):
    upstream.script(Reset())
    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        _run(_exchange(LeanTransport(), _request(upstream.base_url, {"model": "m"})))
    upstream.script(Sse(reset_after=2))
    with pytest.raises(httpx.ReadError):
        _run(_exchange(LeanTransport(), _request(upstream.base_url, {"model": "m", "stream": True})))


def test_nothing_listening_is_a_connect_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(httpx.ConnectError):
        _run(_exchange(LeanTransport(), _request(f"http://127.0.0.1:{port}/v1", {"model": "m"})))


def test_a_body_left_unread_closes_its_connection(upstream):
    upstream.script(Sse(gap=0.05))

    async def go() -> int:
        transport = LeanTransport()
        response = await transport.handle_async_request(_request(upstream.base_url, {"model": "m", "stream": True}))
        async for _ in response.aiter_raw():
            break  # the client went away after the first event
        await response.aclose()
        pool = next(iter(transport._pools.values()))
        return len(pool.idle) + pool.active

    assert _run(go()) == 0


def test_marina_answers_504_when_the_provider_is_too_slow(marina_url, upstream, settings):
    from ledger.models import Trace
    from tests.conftest import MARINA_KEY

    settings.MARINA_UPSTREAM_TIMEOUT = 0.3
    upstream.script(Reply(json=completion("late"), delay=1.0))
    response = httpx.post(
        f"{marina_url}/v1/chat/completions",
        json={"model": "openrouter/openai/gpt-5.2", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {MARINA_KEY}"},
        timeout=10,
    )
    assert response.status_code == 504 and response.json()["error"]["code"] == "upstream_error"
    assert Trace.objects.get().spans.get().error_kind == "timeout"


def test_each_request_gets_its_own_read_timeout_on_a_reused_connection(upstream):
    async def go() -> float:
        transport = LeanTransport()
        await _exchange(transport, _request(upstream.base_url, {"model": "m"}, read=30))
        upstream.script(Reply(json=completion("late"), delay=1.0))
        started = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            await _exchange(transport, _request(upstream.base_url, {"model": "m"}, read=0.3))
        return time.monotonic() - started

    assert _run(go()) < 0.9


def test_a_sent_request_is_not_held_while_its_answer_is_awaited(upstream):
    # send() writes it; from then on only the connection is held, not the request and its body,
    # while a reasoning model thinks (issue 45: thousands of streams wait so).
    upstream.script(Reply(json=completion("late"), delay=0.3))

    async def go() -> tuple[bool, int, bytes]:
        transport = LeanTransport()
        request = _request(upstream.base_url, {"model": "m", "messages": [{"role": "user", "content": "x" * 20_000}]})
        held = weakref.ref(request)
        sent = await transport.send(request)
        del request
        gc.collect()
        let_go = held() is None
        response = await sent.response()
        body = await response.aread()
        await response.aclose()
        await transport.aclose()
        return let_go, response.status_code, body

    let_go, status, body = _run(go())
    assert let_go
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "late"
    assert upstream.requests[0].body["messages"][0]["content"] == "x" * 20_000


def test_a_cancelled_wait_for_the_answer_releases_its_connection(upstream):
    upstream.script(Reply(json=completion(), delay=2))

    async def go() -> tuple[int, int]:
        transport = LeanTransport()
        sent = await transport.send(_request(upstream.base_url, {"model": "m"}))
        return await _pool_after_cancelling(transport, sent.response(), after=0.1)

    assert _run(go()) == (0, 0)  # released, and closed rather than kept: its answer was never read


# --- A POST read whole: post(), then Sent.read() ------------------------------------------------
HEADERS = [(b"Accept", b"*/*"), (b"content-type", b"application/json"), (b"X-Request-Id", b"r-1")]
TIMEOUTS = httpx.Timeout(10, read=5).as_dict()


async def _post_whole(transport: LeanTransport, base_url: str, body: bytes, read: float = 5.0) -> Answer:
    target = Target.of(httpx.URL(f"{base_url}/chat/completions"))
    sent = await transport.post(target, HEADERS, body, httpx.Timeout(10, read=read).as_dict())
    return await sent.read()


@pytest.mark.parametrize("body", [b'{"model": "m"}', b""], ids=["body", "empty"])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/chat/completions?api-version=2024-10-21"])
def test_post_writes_the_bytes_send_writes_for_the_same_request(raw_upstream, body, path):
    url = f"http://127.0.0.1:{raw_upstream.listener.getsockname()[1]}{path}"

    async def go() -> None:
        transport = LeanTransport()
        request = httpx.Request("POST", url, headers=HEADERS, content=body, extensions={"timeout": TIMEOUTS})
        response = await (await transport.send(request)).response()
        await response.aread()
        await response.aclose()
        await (await transport.post(Target.of(httpx.URL(url)), HEADERS, body, TIMEOUTS)).read()
        await transport.aclose()

    _run(go())
    by_send, by_post = raw_upstream.requests
    assert by_post == by_send
    head, _, sent_body = by_post.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == f"POST {path} HTTP/1.1".encode()
    host = f"Host: 127.0.0.1:{raw_upstream.listener.getsockname()[1]}".encode()
    length = f"Content-Length: {len(body)}".encode()
    given = [name + b": " + value for name, value in HEADERS]
    # httpx.Request's order: Host first, then Content-Length last, or right after Host when it is 0.
    assert lines[1:] == ([host, *given, length] if body else [host, length, *given])
    assert sent_body == body


def test_a_whole_answer_keeps_its_connection_for_the_next(raw_upstream):
    raw_upstream.answers.extend([Raw(raw_reply(b'{"n": 1}', headers=("Retry-After: 3",))), Raw(raw_reply(b'{"n": 2}'))])

    async def go() -> tuple[list[Answer], int]:
        transport = LeanTransport()
        answers = [await _post_whole(transport, raw_upstream.base_url, b"{}") for _ in range(2)]
        pool = next(iter(transport._pools.values()))
        idle = len(pool.idle) if pool.active == 0 else -1
        await transport.aclose()
        return answers, idle

    answers, idle = _run(go())
    assert [(a.status, a.body) for a in answers] == [(200, b'{"n": 1}'), (200, b'{"n": 2}')]
    assert answers[0].headers == [(b"Content-Type", b"application/json"), (b"Content-Length", b"8"), (b"Retry-After", b"3")]
    assert answers[0].queued == 0.0
    assert (raw_upstream.accepted, idle) == (1, 1)  # one connection, reused, then idle


@pytest.mark.parametrize(
    "cut, then, error",
    [
        (b"", "close", httpx.RemoteProtocolError),  # closed before its head
        (b'{"choi', "close", httpx.RemoteProtocolError),  # closed mid-body
        (b'{"choi', "stall", httpx.ReadTimeout),  # silent mid-body
    ],
    ids=["closed-before-head", "closed-mid-body", "stalled-mid-body"],
)
def test_an_answer_not_read_to_its_end_closes_its_connection(raw_upstream, cut, then, error):
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" if cut else b""
    raw_upstream.answers.append(Raw(head + cut, then=then))

    async def go() -> tuple[int, int, bytes]:
        transport = LeanTransport()
        with pytest.raises(error):
            await _post_whole(transport, raw_upstream.base_url, b"{}", read=0.3)
        pool = next(iter(transport._pools.values()))
        held = pool.active + len(pool.idle)
        answer = await _post_whole(transport, raw_upstream.base_url, b"{}")  # on a new connection
        await transport.aclose()
        return held, pool.active, answer.body

    held, active, body = _run(go())
    assert (held, active, body) == (0, 0, b'{"ok": true}')
    assert raw_upstream.accepted == 2
    if then == "stall":
        assert raw_upstream.wait_closed(1)  # Marina closed it: the provider saw it go


def test_a_cancelled_read_closes_its_connection(raw_upstream):
    raw_upstream.answers.append(Raw(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{", then="stall"))

    async def go() -> tuple[int, int]:
        transport = LeanTransport()
        target = Target.of(httpx.URL(f"{raw_upstream.base_url}/chat/completions"))
        sent = await transport.post(target, HEADERS, b"{}", TIMEOUTS)
        return await _pool_after_cancelling(transport, sent.read(), after=0.2)

    assert _run(go()) == (0, 0)
    assert raw_upstream.wait_closed(1)


def test_post_waits_for_a_free_connection_and_says_how_long(raw_upstream):
    async def go() -> float:
        transport = LeanTransport(max_connections=1)
        target = Target.of(httpx.URL(f"{raw_upstream.base_url}/chat/completions"))
        first = await transport.post(target, HEADERS, b"{}", TIMEOUTS)  # holds the one connection
        with pytest.raises(httpx.PoolTimeout):
            await transport.post(target, HEADERS, b"{}", {**TIMEOUTS, "pool": 0.1})
        second = asyncio.ensure_future(_post_whole(transport, raw_upstream.base_url, b"{}"))
        await asyncio.sleep(0.3)
        await first.read()
        answer = await second
        await transport.aclose()
        return answer.queued

    assert 0.25 < _run(go()) < 2
    assert raw_upstream.accepted == 1 and len(raw_upstream.requests) == 2
