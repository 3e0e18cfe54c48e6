"""What a streamed call holds while it waits for its provider's first byte
(issue 45): a reasoning model may think for minutes, with thousands of
streams waiting in one worker, so once the provider has the request the
parsed body and the request's bytes are let go (docs/performance.md). Through a live Marina, which
runs in a thread of this process with the scripted upstream: the dicts of
the body alive meanwhile are counted in the whole process."""
from __future__ import annotations

import gc
import http.client
import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest

from passthru.context import Inbound
from passthru.fallback import Bodies
from passthru.intake import BODY
from passthru.providers import Plan, resolve
from tests.conftest import MARINA_KEY
from tests.upstream import Reply, ScriptedUpstream, Sse

THINKING = 60.0  # at most: the provider's first byte waits for the test's checks (`answer`)


@pytest.fixture
def two_providers(marina_config, upstream):
    """An unprefixed id tries anthropic, then openai: both the scripted upstream under their own paths."""
    root = upstream.base_url.removesuffix("/v1")
    providers = {name: dict(conf) for name, conf in marina_config.MARINA_PROVIDERS.items()}
    for name in ("anthropic", "openai"):
        providers[name] = {"base_url": f"{root}/{name}/v1", "api_key": f"sk-{name}-key", "key_env": f"{name.upper()}_API_KEY"}
    marina_config.MARINA_PROVIDERS = providers
    marina_config.MARINA_PROVIDER_ORDER = ["anthropic", "openai"]
    return marina_config


def _request_body(model: str, marker: str) -> bytes:
    """The request's bytes: no dict of it stays alive in this test."""
    messages = [{"role": "system", "content": "policy " * 500}, {"role": "user", "content": marker}]
    return json.dumps({"model": model, "messages": messages, "stream": True}).encode()


def _start_stream(marina_url: str, body: bytes) -> http.client.HTTPConnection:
    url = urlsplit(marina_url)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=30)
    conn.request(
        "POST", "/v1/chat/completions", body=body,
        headers={"authorization": f"Bearer {MARINA_KEY}", "content-type": "application/json"},
    )
    return conn


def _wait_for_requests(upstream: ScriptedUpstream, n: int) -> None:
    deadline = time.monotonic() + 10
    while len(upstream.requests) < n:
        assert time.monotonic() < deadline, f"the upstream got {len(upstream.requests)} requests, not {n}"
        time.sleep(0.01)


def _settle(held: Callable[[], bool]) -> None:
    """Until `held()` is False (at most 5 s): the provider has the request, and
    Marina lets go of the body as its write returns, a moment later on a busy machine."""
    deadline = time.monotonic() + 5
    while held() and time.monotonic() < deadline:
        time.sleep(0.05)


def _bodies_alive(marker: str) -> list[dict[str, Any]]:
    """Every dict alive in this process whose messages include `marker`."""
    gc.collect()
    return [
        o for o in gc.get_objects()
        if type(o) is dict
        and isinstance(o.get("messages"), list)
        and any(isinstance(m, dict) and m.get("content") == marker for m in o["messages"])
    ]


def _inbound_bodies() -> list[bytes]:
    """The bytes still held by chat requests' Inbounds."""
    return [o.body for o in gc.get_objects() if isinstance(o, Inbound) and o.path == "/v1/chat/completions" and o.body]


def _read_stream(conn: http.client.HTTPConnection) -> tuple[int, str, str]:
    """(status, the model that answered, the text streamed) once it has all come."""
    response = conn.getresponse()
    raw = response.read().decode()
    conn.close()
    text = "".join(
        chunk["choices"][0]["delta"].get("content") or ""
        for line in raw.splitlines()
        if line.startswith("data: {") and (chunk := json.loads(line[6:]))["choices"]
    )
    assert raw.rstrip().endswith("data: [DONE]")
    return response.status, response.getheader("x-marina-upstream-model") or "", text


def test_a_stream_waiting_for_its_first_byte_holds_no_parsed_body(marina_url, upstream):
    marker = f"waiting {uuid.uuid4()}"
    answer = threading.Event()
    upstream.script(Sse(delay=THINKING, until=answer))
    conn = _start_stream(marina_url, _request_body("openrouter/openai/gpt-5.2", marker))
    _wait_for_requests(upstream, 1)
    _settle(lambda: len(_bodies_alive(marker)) > 1 or bool(_inbound_bodies()))
    alive = _bodies_alive(marker)
    # The one left is the scripted upstream's record of what it received: Marina holds none.
    assert [id(o) for o in alive] == [id(upstream.requests[0].body)]
    # Nor the bytes: the request's Inbound gave them up, and no scope still holds them.
    waiting = [o for o in gc.get_objects() if isinstance(o, Inbound) and o.path == "/v1/chat/completions"]
    assert waiting and not _inbound_bodies()
    assert not [o for o in gc.get_objects() if type(o) is dict and BODY in o]
    answer.set()
    status, model, text = _read_stream(conn)
    assert (status, model, text) == (200, "openrouter/openai/gpt-5.2", "Hello there, streamed.")
    assert upstream.requests[0].body["messages"][1]["content"] == marker


def test_a_fallback_stream_holds_no_parsed_body_and_sends_the_next_provider_the_same(two_providers, marina_url, upstream):
    marker = f"falling back {uuid.uuid4()}"
    answer = threading.Event()
    upstream.script(Reply(status=503, json={"error": {"message": "overloaded"}}), Sse(delay=THINKING, until=answer))
    conn = _start_stream(marina_url, _request_body("gpt-4.1-mini", marker))
    _wait_for_requests(upstream, 2)
    _settle(lambda: len(_bodies_alive(marker)) > 2)
    alive = _bodies_alive(marker)
    assert sorted(id(o) for o in alive) == sorted(id(r.body) for r in upstream.requests)
    answer.set()
    status, model, text = _read_stream(conn)
    assert (status, model, text) == (200, "openai/gpt-4.1-mini", "Hello there, streamed.")
    first, second = (r.body for r in upstream.requests)
    assert [r.path.split("/")[1] for r in upstream.requests] == ["anthropic", "openai"]
    assert second == first and second["messages"][1]["content"] == marker  # parsed again from the copy kept


def test_bodies_gives_the_first_attempt_the_dict_and_later_ones_equal_copies(marina_config):
    body = {"model": "x", "messages": [{"role": "user", "content": "héllo \ud800"}], "n": 2**70, "temperature": 0.1}
    route = resolve("openrouter/openai/gpt-5.2")
    bodies = Bodies(body, Plan("x", (route, route), fallback=True))
    assert bodies.next() is body
    again = bodies.next()
    assert again == body and again is not body and again["messages"] is not body["messages"]
    alone = Bodies(body, Plan("x", (route,)))
    assert alone.next() is body
    with pytest.raises(RuntimeError):
        alone.next()


def _sent_header_lists() -> list[list[Any]]:
    """Every list alive in this process that holds a response's header pairs as ASGI sends them."""
    gc.collect()
    return [
        o for o in gc.get_objects()
        if type(o) is list and o and all(type(p) is tuple and len(p) == 2 and type(p[0]) is bytes for p in o)
        and any(p[0].lower() == b"x-marina-upstream-model" for p in o)
    ]


def test_a_relaying_stream_holds_no_list_of_the_headers_it_sent(marina_url, upstream):
    # Once the status line and headers are out, a stream that relays for minutes keeps no copy
    # of them (a worker holds thousands of streams; issue 45).
    upstream.script(Sse(stall_after=1, stall_seconds=2.0))
    conn = _start_stream(marina_url, _request_body("openrouter/openai/gpt-5.2", f"relaying {uuid.uuid4()}"))
    response = conn.getresponse()  # the headers are sent: the stream relays its first chunk, then waits
    assert response.status == 200 and response.getheader("x-marina-upstream-model") == "openrouter/openai/gpt-5.2"
    assert response.readline().startswith(b"data: {")
    assert _sent_header_lists() == []
    raw = response.read().decode()
    conn.close()
    assert raw.rstrip().endswith("data: [DONE]")
