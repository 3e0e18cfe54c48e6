"""A plain call (passthru/upstream.py `post_chat`) on the lean transport, which
builds no httpx.Request and reads no httpx.Response: the provider gets the bytes
the httpx.Request would have written, the connection is kept or closed as
before, a compressed answer is decoded by httpx as before, and each failure is
the error kind it was. Real sockets on loopback: the scripted upstream, or the
recording one (tests/passthru/conftest.py) where the bytes matter."""
from __future__ import annotations

import asyncio
import gzip
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from passthru import upstream as upstream_client
from passthru.errors import UpstreamError
from passthru.providers import Provider
from passthru.wire import LeanTransport
from tests.e2e.servers import free_port
from tests.passthru.conftest import Raw
from tests.upstream import Reply, completion

BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
INCOMING = {"x-request-id": "req-1", "user-agent": "agent/1.0", "authorization": "Bearer the-client's"}


def provider(base_url: str) -> Provider:
    return Provider("test", base_url, "sk-provider", "TEST_API_KEY")


def run(call: Callable[[], Awaitable[Any]]) -> Any:
    """`call`'s result, on a loop of its own; the lean transport it used is closed after."""

    async def go() -> Any:
        try:
            return await call()
        finally:
            await upstream_client._lean[asyncio.get_running_loop()].aclose()

    return asyncio.run(go())


def failure(call: Callable[[], Awaitable[Any]]) -> UpstreamError:
    async def failing() -> UpstreamError:
        with pytest.raises(UpstreamError) as caught:
            await call()
        return caught.value

    return run(failing)


@pytest.fixture
def scripted_reply(upstream) -> Callable[[Reply], upstream_client.Reply]:
    """The Reply of a plain call the scripted upstream answers with `step`."""

    def call(step: Reply) -> upstream_client.Reply:
        upstream.script(step)
        return run(lambda: upstream_client.post_chat(provider(upstream.base_url), BODY, INCOMING))

    return call


def test_a_plain_call_writes_the_bytes_of_the_httpx_request_it_replaces(raw_upstream):
    up = provider(raw_upstream.base_url)
    headers = upstream_client._headers(up, INCOMING)

    async def both() -> None:
        await upstream_client._post(up, BODY, headers)  # the lean path
        before = LeanTransport()  # what was sent before: httpx.Request, LeanTransport.send
        request = upstream_client._request(f"{up.base_url}/chat/completions", headers, BODY)
        response = await (await before.send(request)).response()
        await response.aread()
        await response.aclose()
        await before.aclose()

    run(both)
    now, before = raw_upstream.requests
    assert now == before
    head, _, body = now.partition(b"\r\n\r\n")
    names = [line.split(b":")[0] for line in head.split(b"\r\n")[1:]]
    # httpx's Host first; its client's defaults, less the User-Agent the agent's replaces; ours; Content-Length last.
    assert names == [
        b"Host", b"Accept", b"Accept-Encoding", b"Connection",
        b"content-type", b"x-request-id", b"user-agent", b"authorization", b"Content-Length",
    ]
    assert b"\r\nauthorization: Bearer sk-provider\r\n" in head and b"the-client's" not in now
    assert body == BODY


def test_plain_calls_reuse_one_connection(raw_upstream):
    up = provider(raw_upstream.base_url)

    async def three() -> list[upstream_client.Reply]:
        return [await upstream_client.post_chat(up, BODY, INCOMING) for _ in range(3)]

    replies = run(three)
    assert [r.status for r in replies] == [200, 200, 200]
    assert raw_upstream.accepted == 1 and len(raw_upstream.requests) == 3


def test_the_reply_has_the_status_type_and_retry_after_it_had(scripted_reply):
    reply = scripted_reply(
        Reply(raw=b'{"error": "slow down"}', status=429, content_type="application/json; charset=utf-8",
              headers={"Retry-After": "7"})
    )
    assert (reply.status, reply.body, reply.content_type, reply.retry_after) == (
        429, b'{"error": "slow down"}', "application/json; charset=utf-8", "7",
    )
    assert reply.queued == 0.0


@pytest.mark.parametrize("coding, squeeze", [("gzip", gzip.compress), ("deflate", zlib.compress)])
def test_a_compressed_answer_arrives_decoded(scripted_reply, coding, squeeze):
    raw = squeeze(b'{"choices": []}' * 100)
    reply = scripted_reply(Reply(raw=raw, headers={"Content-Encoding": coding}))
    assert (reply.status, reply.body) == (200, b'{"choices": []}' * 100)


def test_an_answer_that_does_not_decode_is_bad_encoding(upstream):
    upstream.script(Reply(raw=b"not gzip at all", headers={"Content-Encoding": "gzip"}))
    error = failure(lambda: upstream_client.post_chat(provider(upstream.base_url), BODY, INCOMING))
    assert (error.kind, error.status) == ("bad_encoding", 502)


def test_an_unknown_coding_is_left_as_it_came(scripted_reply):
    reply = scripted_reply(Reply(raw=b'{"ok": 1}', headers={"Content-Encoding": "x-unknown"}))
    assert reply.body == b'{"ok": 1}'


HEADER_CASES = [
    [],
    [(b"Content-Type", b"application/json")],
    [(b"content-type", b"text/plain"), (b"X-Other", b"1"), (b"CONTENT-TYPE", b"charset=utf-8")],
    [(b"Content-Type", "application/json; name=é".encode())],  # UTF-8: httpx reads it so
    [(b"Content-Type", "application/json; name=é".encode("latin-1"))],  # not UTF-8: Latin-1
    [(b"Content-Type", b"application/json"), (b"X-Name", "é".encode())],  # non-ASCII elsewhere
]


@pytest.mark.parametrize("headers", HEADER_CASES)
def test_header_values_read_as_httpx_reads_them(headers):
    for name in (b"content-type", b"retry-after"):
        assert upstream_client._header(headers, name) == httpx.Headers(headers).get(name.decode(), "")


def test_an_answer_cut_mid_body_is_a_reset_and_its_connection_is_not_kept(raw_upstream):
    raw_upstream.answers.append(Raw(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"choi", then="close"))
    up = provider(raw_upstream.base_url)

    async def cut_then_whole() -> tuple[UpstreamError, upstream_client.Reply]:
        with pytest.raises(UpstreamError) as caught:
            await upstream_client.post_chat(up, BODY, INCOMING)
        return caught.value, await upstream_client.post_chat(up, BODY, INCOMING)

    error, reply = run(cut_then_whole)
    assert error.kind == "reset" and "RemoteProtocolError" in error.message
    assert reply.status == 200 and raw_upstream.accepted == 2


def test_a_read_timeout_mid_body_is_a_timeout_and_closes_the_connection(raw_upstream, settings):
    settings.MARINA_UPSTREAM_TIMEOUT = 0.3
    raw_upstream.answers.append(Raw(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"choi", then="stall"))
    error = failure(lambda: upstream_client.post_chat(provider(raw_upstream.base_url), BODY, INCOMING))
    assert (error.kind, error.status) == ("timeout", 504) and "MARINA_UPSTREAM_TIMEOUT=0.3" in error.message
    assert raw_upstream.wait_closed(1)


def test_no_free_connection_is_a_pool_timeout(upstream, settings):
    settings.MARINA_UPSTREAM_MAX_CONNECTIONS = 1
    settings.MARINA_UPSTREAM_POOL_TIMEOUT = 0.2
    upstream.script(Reply(json=completion("slow"), delay=1.0))
    up = provider(upstream.base_url)

    async def two() -> tuple[upstream_client.Reply, UpstreamError]:
        first = asyncio.ensure_future(upstream_client.post_chat(up, BODY, INCOMING))
        while not upstream.requests:
            await asyncio.sleep(0.005)
        with pytest.raises(UpstreamError) as caught:
            await upstream_client.post_chat(up, BODY, INCOMING)
        return await first, caught.value

    reply, error = run(two)
    assert reply.status == 200 and (error.kind, error.status) == ("pool_timeout", 503)
    assert "MARINA_UPSTREAM_MAX_CONNECTIONS=1" in error.message and len(upstream.requests) == 1


def test_a_connect_error_is_tried_once_more_then_a_connect_error(settings):
    dead = provider(f"http://127.0.0.1:{free_port()}/v1")  # nothing listens there
    connects: list[int] = []

    async def call() -> None:
        upstream_client._lean[asyncio.get_running_loop()] = LeanTransport(on_wait=lambda: connects.append(1))
        await upstream_client.post_chat(dead, BODY, INCOMING)

    error = failure(call)
    assert (error.kind, error.status) == ("connect", 502)
    assert len(connects) == 2  # the request never left: tried again, once
