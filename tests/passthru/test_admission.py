"""Turns (passthru/admission.py): at most MARINA_INTAKE_TURNS /v1 requests of a
worker are worked on before their provider has them; the others wait in the
order they came. The gate itself on an event loop, then a live Marina
(uvicorn in a thread, the lean transport, the scripted upstream on loopback)
with one turn: a turn ends when the provider has the request, when the call
waits for a connection, and when the request ends without a call."""
from __future__ import annotations

import asyncio
import gc
import json
import time
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

from passthru import admission
from tests.conftest import MARINA_KEY
from tests.upstream import Reply, Sse, completion

MODEL = "openrouter/openai/gpt-5.2"
HEADERS = {"authorization": f"Bearer {MARINA_KEY}"}


def _body(**more: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], **more}


# --- The gate -----------------------------------------------------------------
def test_turns_are_handed_on_in_the_order_requests_came():
    async def go() -> tuple[list[int], int]:
        gate = admission.Gate(2)
        admitted: list[int] = []
        turns: dict[int, admission.Turn] = {}
        most = 0

        async def request(n: int) -> None:
            nonlocal most
            turns[n] = await gate.enter()
            admitted.append(n)
            most = max(most, gate.held)

        tasks = []
        for n in range(6):
            tasks.append(asyncio.create_task(request(n)))
            await asyncio.sleep(0)  # each one reaches the gate before the next arrives
        for n in (1, 0, 3, 2, 5, 4):  # turns given back out of order
            while n not in turns:
                await asyncio.sleep(0)
            turns[n].leave()
            turns[n].leave()  # a second leave gives nothing back
        await asyncio.gather(*tasks)
        return admitted, most

    admitted, most = asyncio.run(go())
    assert admitted == [0, 1, 2, 3, 4, 5]
    assert most == 2


def test_a_request_gone_while_waiting_takes_no_turn_and_blocks_no_one():
    async def go() -> tuple[int, int, list[str]]:
        gate = admission.Gate(1)
        first = await gate.enter()
        seen: list[str] = []

        async def request(name: str) -> admission.Turn:
            turn = await gate.enter()
            seen.append(name)
            return turn

        gone = asyncio.create_task(request("gone"))
        handed = asyncio.create_task(request("handed, then gone"))
        last = asyncio.create_task(request("last"))
        await asyncio.sleep(0)
        gone.cancel()  # waiting: it leaves the queue
        await asyncio.sleep(0)
        first.leave()  # the turn is handed to the next in the queue...
        handed.cancel()  # ...which goes before it runs: the turn passes on to the last
        (await last).leave()
        for task in (gone, handed):
            with pytest.raises(asyncio.CancelledError):
                await task
        return gate.held, len(gate.waiting), seen

    held, waiting, seen = asyncio.run(go())
    assert seen == ["last"]
    assert (held, waiting) == (0, 0)


def test_a_turn_left_for_the_network_is_handed_on_after_the_loop_polls():
    """leave_soon(): not within the step that waits (the turn would bound
    nothing: every request's first step would run in one iteration), but by
    the next iterations."""

    async def go() -> tuple[bool, bool]:
        gate = admission.Gate(1)
        await gate.enter()
        second = asyncio.create_task(gate.enter())
        await asyncio.sleep(0)  # it waits
        admission.leave_soon()
        handed_in_this_step = gate.waiting[0].done()
        await asyncio.wait_for(second, 1)
        return handed_in_this_step, gate.held == 1 and not gate.waiting

    assert asyncio.run(go()) == (False, True)


def test_no_limit_takes_no_turn(settings):
    settings.MARINA_INTAKE_TURNS = 0

    async def go() -> Any:
        return await admission.enter()

    assert asyncio.run(go()) is None


# --- A live Marina with one turn ------------------------------------------------
@pytest.fixture
def one_turn(marina_config):
    marina_config.MARINA_INTAKE_TURNS = 1
    return marina_config


def test_a_stream_waiting_for_its_first_token_holds_no_turn(one_turn, marina_url, upstream):
    """The stream's provider has its request and thinks for 3 s: another call,
    made meanwhile, takes the one turn and is answered before the stream's first token."""
    upstream.script(Sse(delay=3.0), Reply(json=completion("quick")))

    async def go() -> list[str]:
        ended: list[str] = []
        async with httpx.AsyncClient(base_url=f"{marina_url}/v1", headers=HEADERS, timeout=30) as client:

            async def stream() -> None:
                async with client.stream("POST", "/chat/completions", json=_body(stream=True)) as response:
                    assert response.status_code == 200
                    await response.aread()
                ended.append("stream")

            async def plain() -> None:
                response = await client.post("/chat/completions", json=_body())
                assert response.json()["choices"][0]["message"]["content"] == "quick"
                ended.append("plain")

            streaming = asyncio.create_task(stream())
            async with asyncio.timeout(10):
                while not upstream.requests:  # the provider has the stream's request
                    await asyncio.sleep(0.01)
            await plain()
            await streaming
        return ended

    assert asyncio.run(go()) == ["plain", "stream"]


def test_a_call_waiting_for_a_connection_gives_back_its_turn(one_turn, transactional_db, upstream):
    """One connection to the provider, held by a stream: two more calls both
    wait for it (the queue gauge counts two). The first holding its turn while it
    waits would have kept the second from reaching the pool. Marina's ASGI
    application on a new event loop, so that its pool is made with the limit."""
    from marina.asgi import application

    one_turn.MARINA_UPSTREAM_MAX_CONNECTIONS = 1
    upstream.script(Sse(gap=0.3))  # ~2 s on the one connection; then the default completions

    def queued() -> float:
        return REGISTRY.get_sample_value("marina_upstream_queued_calls") or 0.0

    before = queued()

    async def go() -> tuple[float, list[int]]:
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1/v1", headers=HEADERS, timeout=30) as client:
            streaming = asyncio.create_task(client.post("/chat/completions", json=_body(stream=True)))
            async with asyncio.timeout(10):
                while not upstream.requests:
                    await asyncio.sleep(0.01)
            calls = [asyncio.create_task(client.post("/chat/completions", json=_body())) for _ in range(2)]
            most = before
            async with asyncio.timeout(10):
                while not streaming.done():
                    most = max(most, queued())
                    await asyncio.sleep(0.01)
            statuses = [r.status_code for r in await asyncio.gather(streaming, *calls)]
        return most, statuses

    most, statuses = asyncio.run(go())
    assert most == before + 2
    assert statuses == [200, 200, 200]
    assert len(upstream.requests) == 3


def test_a_call_connecting_to_its_provider_holds_no_turn(one_turn, marina_url, upstream, unanswered):
    """A provider whose connect hangs (its SYNs unanswered, as a far or
    overloaded host's take round trips): the call waits for the network, not
    for this worker, so another call takes the one turn and is answered before
    that connect times out (holding the turn, it would have waited for it)."""
    connect_timeout = 5.0
    one_turn.MARINA_UPSTREAM_CONNECT_TIMEOUT = connect_timeout
    providers = {name: dict(conf) for name, conf in one_turn.MARINA_PROVIDERS.items()}
    host, port = unanswered
    providers["openai"] = {"base_url": f"http://{host}:{port}/v1", "api_key": "sk-openai", "key_env": "OPENAI_API_KEY"}
    one_turn.MARINA_PROVIDERS = providers
    upstream.script(Reply(json=completion("meanwhile")))

    async def go() -> tuple[float, int]:
        async with httpx.AsyncClient(base_url=f"{marina_url}/v1", headers=HEADERS, timeout=30) as client:
            began = time.monotonic()
            connecting = asyncio.create_task(client.post("/chat/completions", json=_body(model="openai/gpt-4.1-mini")))
            await asyncio.sleep(0.5)  # its connect has begun
            answered = await client.post("/chat/completions", json=_body())
            assert answered.json()["choices"][0]["message"]["content"] == "meanwhile"
            took = time.monotonic() - began
            return took, (await connecting).status_code

    took, status = asyncio.run(go())
    assert took < connect_timeout
    assert status == 504  # the hanging connect, timed out


def test_reads_never_wait_behind_calls(one_turn, transactional_db, upstream):
    """The one turn held: a call waits for it, a read (health, the model
    list) is answered meanwhile; the call goes once the turn is given back."""
    from marina.asgi import application

    async def go() -> tuple[list[int], bool, int]:
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1/v1", headers=HEADERS, timeout=30) as client:
            held = await admission.enter()  # the gate of this loop, which the application shares
            assert held is not None
            call = asyncio.create_task(client.post("/chat/completions", json=_body()))
            async with asyncio.timeout(10):  # a read waiting for the turn would wait for ever
                reads = [(await client.get(path)).status_code for path in ("/health", "/models")]
            await asyncio.sleep(0.3)
            waited = not call.done() and not upstream.requests
            held.leave()
            return reads, waited, (await call).status_code

    reads, waited, status = asyncio.run(go())
    assert reads == [200, 200]
    assert waited and status == 200


def test_requests_that_end_before_a_call_give_back_their_turn(one_turn, marina_url, upstream):
    """Refused (a body that is not JSON, one that is not an object) or answered without a provider:
    each ends its turn, and the next call is served."""
    with httpx.Client(base_url=f"{marina_url}/v1", headers=HEADERS, timeout=10) as client:
        assert client.post("/chat/completions", content=b"{not json").status_code == 400
        assert client.post("/chat/completions", json=[MODEL]).status_code == 400
        assert client.get("/models").status_code == 200
        answered = client.post("/chat/completions", json=_body())
    assert answered.status_code == 200
    assert len(upstream.requests) == 1


# --- Waiting for a turn in the API's handler (marina/mounts.py) -------------------
def _call_scope(body: bytes) -> dict[str, Any]:
    headers = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
               (b"authorization", HEADERS["authorization"].encode()), (b"content-length", str(len(body)).encode())]
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions", "root_path": "", "query_string": b"",
            "headers": headers, "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 80)}


def _django_requests() -> list[Any]:
    from django.http import HttpRequest

    gc.collect()
    return [o for o in gc.get_objects() if isinstance(o, HttpRequest) and o.path == "/v1/chat/completions"]


class _AsgiClient:
    """One request's ASGI side, as a server plays it: the body once, then
    `http.disconnect` when the client hangs up (`hang_up`, or once the whole
    response is sent if `leave_when_answered`); what the app sends, in `sent`."""

    def __init__(self, body: bytes, *, leave_when_answered: bool) -> None:
        self.messages = [{"type": "http.request", "body": body, "more_body": False}]
        self.sent: list[dict[str, Any]] = []
        self.hang_up = asyncio.Event()
        self.leave_when_answered = leave_when_answered

    async def receive(self) -> dict[str, Any]:
        if self.messages:
            return self.messages.pop(0)
        await self.hang_up.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)
        if self.leave_when_answered and message["type"] == "http.response.body" and not message.get("more_body"):
            self.hang_up.set()

    async def call_behind_a_held_turn(self) -> tuple[admission.Turn, admission.Gate, asyncio.Task[None]]:
        """The one turn taken here, then this request sent to Marina's application: once
        it waits for the turn, (the held turn, the gate, the request's task)."""
        from marina.asgi import application

        held = await admission.enter()
        assert held is not None
        gate = admission._gates[asyncio.get_running_loop()]
        body = self.messages[0]["body"]
        call = asyncio.create_task(application(_call_scope(body), self.receive, self.send))
        async with asyncio.timeout(10):
            while not gate.waiting:
                await asyncio.sleep(0.01)
        return held, gate, call


def test_a_call_waiting_for_its_turn_holds_its_bytes_and_no_django_request(one_turn, transactional_db, upstream):
    """In a burst thousands of calls wait for a turn: each holds its body's
    bytes, and Django's request is made once its turn comes; then it is served."""
    client = _AsgiClient(json.dumps(_body()).encode(), leave_when_answered=True)

    async def go() -> tuple[int, int, bool]:
        held, gate, call = await client.call_behind_a_held_turn()
        requests_while_waiting = len(_django_requests())
        held.leave()
        async with asyncio.timeout(10):
            await call
        return requests_while_waiting, gate.held, bool(upstream.requests)

    requests_while_waiting, held, called = asyncio.run(go())
    assert requests_while_waiting == 0
    assert client.sent[0]["status"] == 200 and called
    assert held == 0


def test_a_call_gone_while_waiting_for_its_turn_is_not_served(one_turn, transactional_db, upstream):
    """The client hangs up while its call waits for the turn: the call ends
    unanswered and uncalled, and the held turn, once given back, is not given back twice."""
    client = _AsgiClient(json.dumps(_body()).encode(), leave_when_answered=False)

    async def go() -> tuple[int, int, int]:
        held, gate, call = await client.call_behind_a_held_turn()
        client.hang_up.set()
        async with asyncio.timeout(10):
            await call
        waiting, held_meanwhile = len(gate.waiting), gate.held
        held.leave()
        return waiting, held_meanwhile, gate.held

    waiting, held_meanwhile, held_after = asyncio.run(go())
    assert client.sent == [] and not upstream.requests
    assert (waiting, held_meanwhile, held_after) == (0, 1, 0)
