"""The least a Python gateway adds to a call at c=1 on this machine, beside Marina.

Issue 45 asks for ≤ 1.0 ms added p50 at c=1 on SQLite. At c=1 Marina's added
latency is its worker's CPU per call (nothing waits: docs/performance.md), so
the question is how much of that CPU any gateway on the same parts must
spend. This script measures a floor: `app` below, a raw ASGI application with
no framework, under the same server (gunicorn, uvicorn's worker, httptools,
uvloop, 2 workers), doing only what every gateway that meters must:

1. read the body and parse it (`json.loads`), take the provider off the model
   id and encode it again (`orjson.dumps`);
2. send it to the provider on a kept-alive connection (a hand-written HTTP/1.1
   request on asyncio's streams: no client library) and read the answer;
3. read the usage from the answer and, for the `floor` target (its SQLite
   file in `FLOOR_LEDGER`, which the runner sets), commit one row to SQLite (WAL, synchronous=NORMAL, as Marina's)
   on a thread of its own, awaited before answering, as Marina commits its
   trace before it answers;
4. answer.

No authentication, no pricing, no trace of spans, no spend upsert, no
Django, and no cycle collector (a worker turns it off as it starts: a floor
may leave cycles for the minutes it runs): what is left is the ASGI server,
the kernel's sockets, the JSON and the thread hand-off. It runs under
gunicorn's own defaults, from bench/ (none of Marina's gunicorn.conf.py,
which gunicorn would read from the project's root; until 2026-12-07 it did,
and with it Marina's collector settings). `floor-nolog` is the same without step 3.

A streamed request (`"stream": true`) gets a connection of its own to the
provider, since a burst's streams run at once; each event is relayed as it
comes, the usage read from the last ones, and the row committed once the
stream ends. bench/slow_streams.py's `floor` target runs a burst of those
beside Marina's (issue 45: what any gateway on these parts needs to take
10,000 streams in on two cores). Every target
is measured with `wrk -c 1` against bench/fake_upstream.py, interleaved over
`--runs`, and the added p50 is each target's p50 less direct's in the same
run; CPU per call is the server processes' user + system time (/proc) over
the calls wrk completed.

    .venv/bin/python bench/floor.py                    # 5 runs of 4 s, SQLite
    .venv/bin/python bench/floor.py --runs 3 --duration 6
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

# --- The floor: a raw ASGI application (gunicorn imports it as floor:app) ------

Scope = dict[str, Any]
UPSTREAM = os.environ.get("FLOOR_UPSTREAM", "127.0.0.1:0")
LEDGER = os.environ.get("FLOOR_LEDGER", "")  # a SQLite file, or "" for none
_local: dict[str, Any] = {}  # per worker: the provider's connection, the writer thread and its database


def _once(name: str, make: Any) -> Any:
    """This worker's `name`, made on first use (setdefault would make one at every call)."""
    if name not in _local:
        _local[name] = make()
    return _local[name]


async def _provider() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    if "conn" not in _local:
        host, port = UPSTREAM.rsplit(":", 1)
        _local["conn"] = await asyncio.open_connection(host, int(port))
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] = _local["conn"]
    return conn


async def _call(body: bytes) -> bytes:
    async with _once("turn", asyncio.Lock):  # one request at a time on the one connection
        return await _exchange(body)


def _post(body: bytes) -> bytes:
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json\r\n"
            b"authorization: Bearer sk-fake-upstream-key\r\ncontent-length: %d\r\n\r\n%s"
            % (UPSTREAM.encode(), len(body), body))


async def _exchange(body: bytes) -> bytes:
    reader, writer = await _provider()
    writer.write(_post(body))
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    return await reader.readexactly(length)


async def _relay(body: bytes, send: Any) -> dict[str, Any]:
    """A stream on a connection of its own: its chunked body's events sent on
    as they come; the usage they carried."""
    host, port = UPSTREAM.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    usage: dict[str, Any] = {}
    try:
        writer.write(_post(body))
        await reader.readuntil(b"\r\n\r\n")
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        while size := int(await reader.readline(), 16):
            event = (await reader.readexactly(size + 2))[:-2]
            if b'"usage"' in event:
                for line in event.split(b"\n"):
                    if line.startswith(b"data: {"):
                        usage = json.loads(line[6:]).get("usage") or usage
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    finally:
        writer.close()
    return usage


async def _meter(model: str, usage: dict[str, Any]) -> None:
    if LEDGER:
        writer = _once("writer", lambda: ThreadPoolExecutor(1))
        row = (model, 200, usage.get("prompt_tokens"), usage.get("completion_tokens"), time.time())
        await asyncio.get_running_loop().run_in_executor(writer, _commit, row)


def _commit(row: tuple[Any, ...]) -> None:
    db: sqlite3.Connection | None = _local.get("db")
    if db is None:
        db = _local["db"] = sqlite3.connect(LEDGER, isolation_level=None, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("CREATE TABLE IF NOT EXISTS trace (id INTEGER PRIMARY KEY, model TEXT, status INTEGER,"
                   " prompt_tokens INTEGER, completion_tokens INTEGER, created REAL)")
    db.execute("BEGIN")
    db.execute("INSERT INTO trace (model, status, prompt_tokens, completion_tokens, created) VALUES (?, ?, ?, ?, ?)", row)
    db.execute("COMMIT")


async def app(scope: Scope, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        gc.freeze()
        gc.disable()
        for phase in ("startup", "shutdown"):
            await receive()
            await send({"type": f"lifespan.{phase}.complete"})
        return
    if scope["method"] != "POST":  # the runner's check that the server is up
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})
        return
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    request = json.loads(b"".join(chunks))
    request["model"] = request["model"].split("/", 1)[1]
    if request.get("stream"):
        await _meter(request["model"], await _relay(orjson.dumps(request), send))
        return
    reply = await _call(orjson.dumps(request))
    await _meter(request["model"], json.loads(reply).get("usage") or {})
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(reply)).encode())]})
    await send({"type": "http.response.body", "body": reply})


# --- The runner ------------------------------------------------------------------

def main() -> None:
    # Imported here, not above: the floor's workers import this module for `app` alone.
    import tau2_body
    from c1_profile import KEY, MODEL, run_wrk
    from common import LOOPBACK_ONLY_ENV, ROOT, free_port, marina_env, migrate, start, start_fake_upstream

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--duration", type=float, default=4, help="seconds of wrk per target and run")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="marina-floor-") as tmpdir:
        tmp = Path(tmpdir)
        body = tmp / "body.json"
        body.write_bytes(tau2_body.encoded(MODEL, stream=False))
        upstream, up_port = start_fake_upstream(tmp, "--gap-ms", "1")
        servers = []
        try:
            urls = {"direct": f"http://127.0.0.1:{up_port}/v1/chat/completions"}
            for name, ledger in (("floor-nolog", ""), ("floor", str(tmp / "floor.sqlite3"))):
                port = free_port()
                env = {**os.environ, **LOOPBACK_ONLY_ENV, "FLOOR_UPSTREAM": f"127.0.0.1:{up_port}", "FLOOR_LEDGER": ledger}
                servers.append(start(name, [sys.executable, "-m", "gunicorn", "-w", "2",
                                            "-k", "uvicorn_worker.UvicornWorker", "-b", f"127.0.0.1:{port}", "floor:app"],
                                     env=env, base_url=f"http://127.0.0.1:{port}", ready_path="/", log_dir=tmp,
                                     cwd=ROOT / "bench"))
                urls[name] = f"http://127.0.0.1:{port}/v1/chat/completions"
            port = free_port()
            env = marina_env(db_url=f"sqlite:///{tmp / 'marina.sqlite3'}", upstream_port=up_port,
                             bind=f"127.0.0.1:{port}", key=KEY)
            migrate(env)
            servers.append(start("marina", [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "gunicorn.conf.py"),
                                            "marina.asgi:application"], env=env, base_url=f"http://127.0.0.1:{port}",
                                 ready_path="/v1/health", log_dir=tmp))
            urls["marina"] = f"http://127.0.0.1:{port}/v1/chat/completions"
            by_name = {server.name: server for server in servers}
            for url in urls.values():
                run_wrk(url, body, 2)  # connections, imports, caches
            results: dict[str, list[tuple[float, float]]] = {name: [] for name in urls}
            print(f"load average {os.getloadavg()[0]:.2f} at the start")
            for run in range(1, args.runs + 1):
                for name, url in urls.items():
                    server = by_name.get(name)
                    cpu0 = server.cpu() if server else 0.0
                    result = run_wrk(url, body, args.duration)
                    cpu_ms = ((server.cpu() - cpu0) if server else 0.0) * 1000 / max(1, result["requests"])
                    results[name].append((result["p50_us"] / 1000, cpu_ms))
                    print(f"run {run} {name:12s} p50 {result['p50_us'] / 1000:6.2f} ms  requests {result['requests']:6d}"
                          f"  server CPU {cpu_ms:5.2f} ms/call")
            print("\n| target | added p50 at c=1, per run (ms) | median | server CPU per call, median |")
            print("| --- | --- | --- | --- |")
            direct = [p50 for p50, _ in results["direct"]]
            for name in urls:
                if name == "direct":
                    continue
                added = [p50 - d for (p50, _), d in zip(results[name], direct)]
                cpus = [c for _, c in results[name]]
                print(f"| {name} | {', '.join(f'{a:.2f}' for a in added)} | **+{statistics.median(added):.2f}** |"
                      f" {statistics.median(cpus):.2f} ms |")
            print(f"\ndirect p50: {', '.join(f'{d:.2f}' for d in direct)} ms")
        finally:
            for server in servers:
                server.stop()
            upstream.stop()


if __name__ == "__main__":
    main()
