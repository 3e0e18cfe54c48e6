"""Upstream faults against a real gunicorn: resets, 500s, a slow first byte,
a stall mid-stream, invalid JSON, an unreachable provider, and a client that
disconnects mid-stream. Each gets a clean answer or an OpenAI-shaped error,
each is traced with its error kind, no worker dies and no file descriptor or
connection is left behind.

Faults are chosen per request by a marker in the message (`fault:<name>`),
so several rounds run concurrently without depending on arrival order.

A client that leaves once it has the whole answer, before the usage chunk,
is still charged: Marina reads the upstream on (bounded) and meters it."""
from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import Any

import httpx
import pytest

from tests.conftest import MARINA_KEY
from tests.e2e.servers import free_port
from tests.upstream import Received, Reply, Reset, ScriptedUpstream, Sse, Step, completion, sse_chunks

pytestmark = pytest.mark.e2e

TIMEOUT = 1.0  # MARINA_UPSTREAM_TIMEOUT for this server: the slow faults wait past it
ROUNDS = 3
FD_SLACK = 3  # a lazily opened file or an accept in progress
DRAIN = 1.0  # MARINA_DRAIN_AFTER_DISCONNECT_SECONDS for the faults server


EXPLODED = {"error": {"message": "upstream exploded", "type": "server_error", "param": None, "code": None}}


def fault_handler(body: Any) -> Step | None:
    content = str(body["messages"][-1]["content"]) if isinstance(body, dict) else ""
    fault = content.partition("fault:")[2].split()[0] if "fault:" in content else ""
    return {
        "reset": Reset(),
        "reset_stream": Sse(reset_after=2),
        "http_500": Reply(status=500, json=EXPLODED),
        "http_500_stream": Reply(status=500, json=EXPLODED),
        "slow": Reply(json=completion("late"), delay=TIMEOUT + 1.5),
        "slow_stream": Sse(delay=TIMEOUT + 1.5),
        "stall": Sse(stall_after=2, stall_seconds=TIMEOUT + 2),
        "bad_json": Reply(raw=b'{"id": "chatcmpl-x", "choices": [', status=200),
        "disconnect": Sse(chunks=sse_chunks("a long answer " * 40, pieces=40), gap=0.1),
    }.get(fault)


def body(fault: str, n: int, *, stream: bool = False, model: str = "openrouter/openai/gpt-5.2") -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": f"fault:{fault} round {n}"}], "stream": stream}


def envelope(response: httpx.Response) -> dict[str, Any]:
    payload = response.json()
    assert set(payload) == {"error"}, payload
    assert set(payload["error"]) >= {"message", "type", "param", "code"}, payload
    return payload["error"]


def sse_events(text: str) -> list[str]:
    return [e[len("data: ") :] for e in text.split("\n\n") if e.startswith("data: ")]


async def plain(client: httpx.AsyncClient, fault: str, n: int, **kw: Any) -> httpx.Response:
    return await client.post("/v1/chat/completions", json=body(fault, n, **kw))


async def streamed(client: httpx.AsyncClient, fault: str, n: int) -> tuple[httpx.Response, list[str]]:
    async with client.stream("POST", "/v1/chat/completions", json=body(fault, n, stream=True)) as response:
        text = (await response.aread()).decode()
    return response, sse_events(text)


async def disconnect(client: httpx.AsyncClient, n: int) -> str:
    """Read two events of a long stream, then hang up; returns the request id."""
    async with client.stream("POST", "/v1/chat/completions", json=body("disconnect", n, stream=True)) as response:
        assert response.status_code == 200
        seen = 0
        async for line in response.aiter_lines():
            seen += line.startswith("data: ")
            if seen == 2:
                break
        return response.headers["x-request-id"]  # leaving the block closes the connection


async def one_round(base_url: str, n: int, dead_model: str) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {MARINA_KEY}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30) as client:
        results = await asyncio.gather(
            plain(client, "reset", n),
            streamed(client, "reset_stream", n),
            plain(client, "http_500", n),
            streamed(client, "http_500_stream", n),
            plain(client, "slow", n),
            streamed(client, "slow_stream", n),
            streamed(client, "stall", n),
            plain(client, "bad_json", n),
            plain(client, "dead", n, model=dead_model),
            disconnect(client, n),
            plain(client, "none", n),  # a healthy call among the faults
        )
    names = ("reset", "reset_stream", "http_500", "http_500_stream", "slow", "slow_stream", "stall", "bad_json", "dead", "disconnect", "ok")
    return dict(zip(names, results))


def wait_for_trace(ledger, request_id: str, seconds: float = 10) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        trace = ledger.trace(request_id)
        if trace is not None:
            return trace
        time.sleep(0.1)
    raise AssertionError(f"no trace for {request_id}")


def check_round(r: dict[str, Any], ledger) -> None:
    def traced(response: httpx.Response, kind: str, status: str = "error") -> None:
        trace = wait_for_trace(ledger, response.headers["x-request-id"])
        assert (trace["status"], trace["error_kind"], trace["http_status"]) == (status, kind, response.status_code), trace

    response = r["reset"]
    assert response.status_code == 502 and envelope(response)["code"] == "upstream_error"
    traced(response, "reset")

    response, events = r["reset_stream"]
    assert response.status_code == 200  # the status line had gone out before the reset
    assert json.loads(events[-1])["error"]["code"] == "upstream_error", events[-1:]
    assert "[DONE]" not in events
    traced(response, "reset")

    for name in ("http_500", "http_500_stream"):
        response = r[name]
        response = response[0] if isinstance(response, tuple) else response
        assert response.status_code == 500
        assert envelope(response)["message"] == "upstream exploded"  # the provider's own body, as it came
        traced(response, "http_500")

    for name in ("slow", "slow_stream"):
        response = r[name]
        response = response[0] if isinstance(response, tuple) else response
        assert response.status_code == 504
        assert "MARINA_UPSTREAM_TIMEOUT" in envelope(response)["message"]
        traced(response, "timeout")

    response, events = r["stall"]
    assert response.status_code == 200 and len(events) >= 2
    error = json.loads(events[-1])["error"]
    assert "MARINA_UPSTREAM_TIMEOUT" in error["message"], error
    traced(response, "timeout")

    response = r["bad_json"]
    assert response.status_code == 502 and envelope(response)["code"] == "bad_upstream_response"
    traced(response, "bad_json")

    response = r["dead"]
    assert response.status_code == 502 and envelope(response)["code"] == "upstream_error"
    traced(response, "connect")

    trace = wait_for_trace(ledger, r["disconnect"])
    assert (trace["status"], trace["error_kind"]) == ("cancelled", "client_disconnected"), trace

    response = r["ok"]
    assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"]
    traced(response, "", status="ok")


def wait_until_upstream_idle(upstream: ScriptedUpstream, seconds: float = 15) -> list[Received]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with upstream.lock:
            pending = [r for r in upstream.requests if r.outcome == "pending"]
        if not pending:
            return list(upstream.requests)
        time.sleep(0.1)
    raise AssertionError(f"upstream still answering {len(pending)} requests: {pending[:3]}")


def settled_descriptors(server, pid: int, fits: Any = lambda found: True, seconds: float = 15) -> list[Any]:
    """A worker's descriptors once no socket sits in CLOSE_WAIT and `fits`
    holds (closed connections are reaped soon, not at once); what is there
    after `seconds` otherwise, for the caller's assertions to report."""
    deadline = time.monotonic() + seconds
    while True:
        found = server.descriptors(pid)
        if (not [d for d in found if d.state == "CLOSE_WAIT"] and fits(found)) or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def is_database_file(d: Any) -> bool:
    """The ledger's SQLite files (the database, its -wal, -shm and write-turn
    lock): opened once per worker, on the first call that worker serves."""
    return ".sqlite3" in d.target


def beyond_database(found: list[Any]) -> list[Any]:
    return [d for d in found if not is_database_file(d)]


def test_upstream_faults_get_clean_answers_are_traced_and_leak_nothing(servers, upstream):
    upstream.handler = fault_handler
    upstream.keep_alive = False  # no idle pool: every upstream socket left open after a batch is a leak
    dead_port = free_port()  # nothing listens there
    server = servers.start(
        MARINA_UPSTREAM_TIMEOUT=str(TIMEOUT),
        MARINA_EXTRA_PROVIDERS=f"dead=http://127.0.0.1:{dead_port}/v1",
        # The abandoned stream runs ~4 s more: read on for 1 s, then hang up.
        MARINA_DRAIN_AFTER_DISCONNECT_SECONDS=str(DRAIN),
    )
    # Warm up with the very same batch: each worker opens its database
    # connection, lazy imports, and grows its upstream pool to this batch's
    # concurrency. A second identical batch must then add nothing.
    for r in asyncio.run(_rounds(server.base_url, first=100)):
        check_round(r, server.ledger)
    wait_until_upstream_idle(upstream)
    workers = server.worker_pids()
    before = {pid: settled_descriptors(server, pid) for pid in workers}
    for r in asyncio.run(_rounds(server.base_url, first=1)):
        check_round(r, server.ledger)

    received = wait_until_upstream_idle(upstream)
    # Marina hung up on every stream its client abandoned, once it had read
    # on for MARINA_DRAIN_AFTER_DISCONNECT_SECONDS: the upstream's next write failed.
    gone = [r for r in received if "fault:disconnect" in json.dumps(r.body)]
    assert len(gone) == 2 * ROUNDS and all(r.outcome == "client_gone" for r in gone), [r.outcome for r in gone]

    assert server.worker_pids() == workers, "a worker died"
    for pid in workers:
        after = settled_descriptors(
            server, pid, lambda found, pid=pid: len(beyond_database(found)) <= len(beyond_database(before[pid])) + FD_SLACK
        )
        report = "\n".join(["before:", *map(str, before[pid]), "after:", *map(str, after)])
        # The upstream closed every connection: one Marina did not close sits in CLOSE_WAIT.
        assert not [d for d in after if d.state == "CLOSE_WAIT"], report
        assert len(beyond_database(after)) <= len(beyond_database(before[pid])) + FD_SLACK, report
        # A worker that served no warm-up call opens its one database
        # connection now; its checkpoint thread has one of its own from the
        # start (kernel/checkpoint.py). Each connection holds the database and
        # its log open (the -shm and the write-turn lock are shared): a third
        # connection to the same file would be a leak.
        opened = Counter(d.target for d in after if is_database_file(d))
        assert all(n <= (2 if path.endswith((".sqlite3", ".sqlite3-wal")) else 1) for path, n in opened.items()), report

    # Every attempted upstream call, failed or not, is one span and one spend_daily call.
    totals = server.ledger.totals()
    assert totals["traces"] == 2 * ROUNDS * 11
    assert totals["spend_calls"] == totals["spans"] == totals["traces"]
    assert totals["spend_errors"] == 2 * ROUNDS * 10  # all but the healthy call (an abandoned stream counts)


async def _rounds(base_url: str, *, first: int) -> list[dict[str, Any]]:
    return list(await asyncio.gather(*(one_round(base_url, n, "dead/some-model") for n in range(first, first + ROUNDS))))


USAGE_COST = 0.0123  # dollars, as the provider reports them in the usage chunk
USAGE = {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49, "cost": USAGE_COST}


async def leave_at_finish(client: httpx.AsyncClient, n: int) -> tuple[str, str]:
    """Read up to the chunk carrying finish_reason (the whole answer), then
    hang up before the usage chunk; returns (request id, the text received)."""
    request = {**body("leave", n, stream=True), "stream_options": {"include_usage": True}}
    text = ""
    async with client.stream("POST", "/v1/chat/completions", json=request) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            choices = json.loads(line[len("data: ") :])["choices"]
            assert choices, "the usage chunk came before the client left"
            text += choices[0]["delta"].get("content") or ""
            if choices[0].get("finish_reason"):
                break
        return response.headers["x-request-id"], text  # leaving the block closes the connection


def test_a_client_that_leaves_before_the_usage_chunk_is_still_charged(servers, upstream):
    """Issue 10 item 3. The answer is complete when the client leaves; the
    provider bills the call in the usage chunk that follows. The trace says
    the client left (cancelled, client_disconnected) and carries the cost;
    the span says the upstream call finished (ok); spend_daily counts it."""
    upstream.handler = lambda body: Sse(chunks=sse_chunks("the whole answer"), usage=USAGE, usage_delay=0.5)
    server = servers.start()  # the default MARINA_DRAIN_AFTER_DISCONNECT_SECONDS

    async def go() -> list[tuple[str, str]]:
        headers = {"authorization": f"Bearer {MARINA_KEY}"}
        async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=30) as client:
            return list(await asyncio.gather(*(leave_at_finish(client, n) for n in range(4))))

    left = asyncio.run(go())
    cost = int(USAGE_COST * 10**9)
    for request_id, text in left:
        assert text == "the whole answer"
        trace = wait_for_trace(server.ledger, request_id)
        assert (trace["status"], trace["error_kind"], trace["cost_nanousd"]) == ("cancelled", "client_disconnected", cost), trace
        spans = server.ledger.spans_of(request_id)
        assert [(s["status"], s["cost_nanousd"]) for s in spans] == [("ok", cost)], spans
    assert [r.outcome for r in wait_until_upstream_idle(upstream)] == ["complete"] * len(left)
    totals = server.ledger.totals()
    assert totals["spend_cost"] == totals["trace_cost"] == cost * len(left)
    assert (totals["spend_calls"], totals["spend_errors"]) == (len(left), 0)


def test_a_shutdown_lets_a_drain_end_and_keeps_its_trace(servers, upstream):
    """SIGTERM while a stream its client left is still being read on: the
    worker finishes that read (bounded by MARINA_DRAIN_AFTER_DISCONNECT_SECONDS)
    before it stops, and the request is in the ledger with its cost."""
    upstream.handler = lambda body: Sse(chunks=sse_chunks("a long answer " * 40, pieces=40), gap=0.08)  # ~3 s
    server = servers.start(MARINA_DRAIN_AFTER_DISCONNECT_SECONDS="30")

    async def go() -> str:
        headers = {"authorization": f"Bearer {MARINA_KEY}"}
        async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=30) as client:
            return await disconnect(client, 1)

    request_id = asyncio.run(go())
    # The client has left; the upstream is still answering and the trace waits for the drain.
    assert [r.outcome for r in upstream.requests] == ["pending"] and server.ledger.trace(request_id) is None
    assert server.terminate() == 0
    trace = server.ledger.trace(request_id)
    assert trace is not None, server.log()[-4000:]
    assert trace is not None and (trace["status"], trace["error_kind"]) == ("cancelled", "client_disconnected"), trace
    spans = server.ledger.spans_of(request_id)
    assert [s["status"] for s in spans] == ["ok"] and spans[0]["cost_nanousd"], spans
    assert [r.outcome for r in upstream.requests] == ["complete"]
