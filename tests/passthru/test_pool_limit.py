"""The per-provider connection limit (issue 20): a call past
MARINA_UPSTREAM_MAX_CONNECTIONS waits for a free connection (counted by the
gauge marina_upstream_queued_calls meanwhile), its span says for how long,
and one that cannot get a connection within
MARINA_UPSTREAM_POOL_TIMEOUT fails with a 503 naming both settings. Scripted
upstream on loopback, a limit of one connection."""
from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

from passthru import upstream as upstream_module
from passthru.calls import call_json, call_stream
from passthru.context import Inbound, RequestContext
from passthru.errors import UpstreamError
from passthru.providers import resolve
from tests.conftest import MARINA_KEY
from tests.upstream import Sse

MODEL = "openrouter/openai/gpt-5.2"
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture
def one_connection(marina_config):
    marina_config.MARINA_UPSTREAM_MAX_CONNECTIONS = 1
    return marina_config


def _ctx() -> RequestContext:
    return RequestContext.for_request(Inbound("POST", "/v1/chat/completions", {}, b""))


async def _stream_to_end(ctx: RequestContext) -> None:
    reply = await call_stream(ctx, resolve(MODEL), {"model": MODEL, "messages": HELLO, "stream": True})
    assert reply.events is not None
    async for _event in reply.events:
        pass


async def _while_one_stream_runs(upstream, call):
    """Start a stream that holds the one connection (~1 s: 0.15 s between
    events), make `call` once the provider has it, then let the stream end."""
    first_ctx = _ctx()
    first = asyncio.create_task(_stream_to_end(first_ctx))
    while not upstream.requests:  # the stream has the connection
        await asyncio.sleep(0.005)
    try:
        return first_ctx, await call()
    finally:
        await first


def test_a_call_past_the_limit_waits_and_its_span_says_how_long(one_connection, upstream):
    upstream.script(Sse(gap=0.15))  # then the default completion
    second_ctx = _ctx()

    def queued_gauge() -> float:
        return REGISTRY.get_sample_value("marina_upstream_queued_calls") or 0.0

    before = queued_gauge()
    seen: list[float] = []

    async def second():
        call = asyncio.ensure_future(call_json(second_ctx, resolve(MODEL), {"model": MODEL, "messages": HELLO}))
        async with asyncio.timeout(5):
            while queued_gauge() == before:  # the gauge counts the call while it waits
                await asyncio.sleep(0.005)
        seen.append(queued_gauge())
        return await call

    first_ctx, completion = asyncio.run(_while_one_stream_runs(upstream, second))
    assert seen == [before + 1] and queued_gauge() == before
    assert completion.status == 200 and len(upstream.requests) == 2
    assert "queued_ms" not in first_ctx.spans[0].detail  # a free connection: no wait recorded
    span = second_ctx.spans[0]
    # It waited for the stream's remaining events (6 gaps of 0.15 s at least), and the wait is part of its duration.
    assert 600 <= span.detail["queued_ms"] <= span.duration_ms
    assert span.status == "ok"


def test_no_free_connection_within_the_pool_timeout_is_a_503_naming_the_settings(one_connection, upstream, caplog):
    one_connection.MARINA_UPSTREAM_POOL_TIMEOUT = 0.2
    upstream.script(Sse(gap=0.15))
    ctx = _ctx()

    async def second() -> UpstreamError:
        try:
            await call_stream(ctx, resolve(MODEL), {"model": MODEL, "messages": HELLO, "stream": True})
        except UpstreamError as exc:
            return exc
        raise AssertionError("the second call got a connection past the limit")

    with caplog.at_level(logging.WARNING, logger="passthru.wire"):
        _first_ctx, failure = asyncio.run(_while_one_stream_runs(upstream, second))
    assert (failure.status, failure.kind, failure.code) == (503, "pool_timeout", "upstream_error")
    assert "MARINA_UPSTREAM_POOL_TIMEOUT=0.2s" in failure.message
    assert "MARINA_UPSTREAM_MAX_CONNECTIONS=1" in failure.message
    span = ctx.spans[0]
    assert (span.status, span.error_kind, span.http_status) == ("error", "pool_timeout", 503)
    assert span.detail["queued_ms"] == 200.0
    assert len(upstream.requests) == 1  # the refused call never reached the provider
    waits = [r for r in caplog.records if "wait for a connection" in r.getMessage()]
    assert len(waits) == 1 and "MARINA_UPSTREAM_MAX_CONNECTIONS" in waits[0].getMessage()


@pytest.fixture
def fresh_pools():
    """The live server's transport reads the limit when it is made: make a new
    one for this test, and again after it, so no other test inherits the limit."""
    upstream_module._lean.clear()
    yield
    upstream_module._lean.clear()


def test_the_503_reaches_the_client_in_openais_envelope(marina_url, marina_config, upstream, fresh_pools):
    """Over HTTP through a live Marina: a stream holds the only connection; a
    plain call meanwhile gets the 503 envelope instead of waiting silently."""
    marina_config.MARINA_UPSTREAM_MAX_CONNECTIONS = 1
    marina_config.MARINA_UPSTREAM_POOL_TIMEOUT = 0.3
    upstream.script(Sse(delay=3.0))
    headers = {"authorization": f"Bearer {MARINA_KEY}"}
    body: dict[str, Any] = {"model": MODEL, "messages": HELLO}

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(base_url=f"{marina_url}/v1", headers=headers, timeout=10) as client:
            stream = asyncio.create_task(client.post("/chat/completions", json={**body, "stream": True}))
            while not upstream.requests:  # the stream holds the connection upstream
                await asyncio.sleep(0.01)
            refused = await client.post("/chat/completions", json=body)
            (await stream).raise_for_status()
            return refused

    refused = asyncio.run(go())
    assert refused.status_code == 503
    error = refused.json()["error"]
    assert error["code"] == "upstream_error" and error["type"] == "server_error"
    assert "MARINA_UPSTREAM_MAX_CONNECTIONS=1" in error["message"]
    assert "MARINA_UPSTREAM_POOL_TIMEOUT" in error["message"]


def test_the_limit_never_exceeds_what_the_file_descriptor_limit_leaves_room_for(marina_config, caplog):
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    room = (soft - upstream_module._RESERVED_FDS) // 2
    marina_config.MARINA_UPSTREAM_MAX_CONNECTIONS = 10
    assert upstream_module.max_connections() == 10
    marina_config.MARINA_UPSTREAM_MAX_CONNECTIONS = soft * 2  # two descriptors per stream: never fits
    with caplog.at_level(logging.WARNING, logger="passthru.upstream"):
        assert upstream_module.max_connections() == room
    assert any("MARINA_UPSTREAM_MAX_CONNECTIONS" in r.getMessage() for r in caplog.records)


def test_by_default_the_pool_takes_what_the_file_descriptor_limit_leaves_room_for(marina_config, caplog, monkeypatch):
    """A fixed default (4096) queued the calls of a 10,000-stream burst over two
    workers for a whole stream's length; unset (0), the pool is as large as the
    descriptors allow, quietly."""
    import resource
    import runpy
    from pathlib import Path

    import marina

    monkeypatch.delenv("MARINA_UPSTREAM_MAX_CONNECTIONS", raising=False)
    assert runpy.run_path(str(Path(marina.__file__).parent / "settings.py"))["MARINA_UPSTREAM_MAX_CONNECTIONS"] == 0
    marina_config.MARINA_UPSTREAM_MAX_CONNECTIONS = 0
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with caplog.at_level(logging.WARNING, logger="passthru.upstream"):
        assert upstream_module.max_connections() == max(16, (soft - upstream_module._RESERVED_FDS) // 2)
        monkeypatch.setattr(resource, "getrlimit", lambda _which: (20_000, 20_000))
        assert upstream_module.max_connections() == 9_872  # (20,000 - 256) // 2: 10,000 streams over two workers fit
        monkeypatch.setattr(resource, "getrlimit", lambda _which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        assert upstream_module.max_connections() == upstream_module._NO_FD_LIMIT
    assert not caplog.records


def test_the_default_named_in_the_pool_timeout_message(marina_config, monkeypatch):
    import resource

    marina_config.MARINA_UPSTREAM_MAX_CONNECTIONS = 0
    monkeypatch.setattr(resource, "getrlimit", lambda _which: (20_000, 20_000))
    failure = upstream_module._failure(resolve(MODEL).provider, httpx.PoolTimeout("no connection"))
    assert failure.status == 503
    assert "9872 connections" in failure.message and "file-descriptor limit" in failure.message
    assert "MARINA_UPSTREAM_MAX_CONNECTIONS=N sets fewer" in failure.message
