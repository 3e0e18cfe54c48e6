"""Memory per stream waiting for its first token (issue 45): what one worker
holds for each of N streams while the provider thinks.

    .venv/bin/python bench/waiting_streams.py                  # 1,000 streams: resident KB per waiting stream
    .venv/bin/python bench/waiting_streams.py --where          # and what holds it, by line (tracemalloc)
    .venv/bin/python bench/waiting_streams.py --marina-env MARINA_TRACE_BODIES=on
    .venv/bin/python bench/waiting_streams.py --queued         # requests waiting for their turn instead
    .venv/bin/python bench/waiting_streams.py --relay 30       # and again once they relay (first token after 30 s)

The upstream (bench/fake_upstream.py) sends nothing for an hour: every
stream stays where a reasoning model's would, Marina's request sent and its
first byte awaited. Marina runs as one worker does (this script's `--serve`:
uvicorn with uvloop and httptools, marina.asgi's application, what it loaded
frozen as gunicorn.conf.py's post_worker_init does), on a temporary SQLite
ledger. The client is plain blocking sockets in this process: each sends
the τ²-sized body (bench/tau2_body.py, ~19 KB) with "stream": true and
never reads.

First `--warm` streams are opened and left waiting (the code paths, the
upstream pool, the allocator's first arenas), then the worker's resident
memory (VmRSS, after a full collection and the heap's trim) is read; then `--streams` more are
opened, and once the worker holds all their upstream connections, read
again. The difference over `--streams` is the figure. With `--where` the
worker traces its allocations (tracemalloc, which costs memory of its own: the
resident figure of such a run is not comparable) and the report lists the
lines that allocated what the waiting streams still hold, per stream.

With `--queued` the worker first holds all its turns (passthru/admission.py),
as a burst's first requests do: the `--streams` requests then wait for a turn,
read but not yet begun, as thousands do in a burst; the figure is once the
worker counts them all waiting. The worker's resident memory before the first
request (after /v1/health, collected) is reported too: its base.

With `--relay F` the upstream sends its first token F seconds after each
call, then a chunk every 2 s (`--relay-chunks`, 20 by default): the client
reads every stream (a thread drains the sockets), and once all the streams
are relaying (the last opened F + `--relay-after` seconds ago) the worker is
read a third time; the figure is then the relaying streams' against the
waiting ones', and `--where` lists what relaying added, by line."""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tau2_body
from common import ROOT, free_port, marina_env, migrate, start, start_fake_upstream
from slow_streams import sample

sys.path.insert(0, str(ROOT))  # the project's packages, for the worker (`--serve`) and the heap trim's period

KEY = "sk-marina-bench-key-0000"
MODEL = "openai/gpt-4.1-mini"
REPORT = "MARINA_BENCH_REPORT"  # where the served worker writes its figures when signalled (--serve)


def serve(port: int) -> None:
    """One Marina worker on 127.0.0.1:port; SIGUSR1 writes its figures to $MARINA_BENCH_REPORT."""
    import uvicorn

    from marina.asgi import application
    from marina.worker import MarinaServer
    from passthru import admission

    gc.freeze()  # as gunicorn.conf.py's post_worker_init
    report = Path(os.environ[REPORT])
    taken = 0

    def write_figures() -> None:
        nonlocal taken
        uncollected = _rss_kb()
        gc.collect()
        gate = admission._gates.get(asyncio.get_running_loop())
        out: dict[str, object] = {"rss_kb": _rss_kb(), "uncollected_kb": uncollected, "queued": len(gate.waiting) if gate else 0,
                                  **_pymalloc()}
        if tracemalloc.is_tracing():
            taken += 1
            snapshot = report.with_suffix(f".{taken}.snapshot")
            tracemalloc.take_snapshot().dump(str(snapshot))
            out["snapshot"] = str(snapshot)
        report.write_text(json.dumps(out))

    held: list[object] = []

    async def hold_turns() -> None:
        from django.conf import settings

        for _ in range(settings.MARINA_INTAKE_TURNS):
            held.append(await admission.enter())

    def hold_all_turns() -> None:
        held.append(asyncio.get_running_loop().create_task(hold_turns()))

    async def main() -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, write_figures)
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR2, hold_all_turns)
        config = uvicorn.Config(application, host="127.0.0.1", port=port, http="httptools", lifespan="off",
                                log_level="warning")
        await MarinaServer(config).serve()

    import uvloop

    uvloop.run(main())


def _pymalloc() -> dict[str, int]:
    """Python's small-object allocator: its arenas (1 MB each in 3.10+) and the bytes of the blocks in use in them."""
    with tempfile.TemporaryFile() as out:
        saved = os.dup(2)
        os.dup2(out.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read().decode()
    found = {}
    for label, key in (("# arenas allocated current", "arenas"), ("# bytes in allocated blocks", "block_bytes")):
        line = next((ln for ln in text.splitlines() if ln.startswith(label)), None)
        if line is None:  # not pymalloc's statistics (under tracemalloc, --where, it prints none)
            return {}
        found[key] = int(line.split("=")[1].replace(",", ""))
    return found


def _rss_kb(pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def figures(pid: int, report: Path) -> dict[str, object]:
    """Ask the worker for its figures (after a full collection) and wait for them:
    once its heap has been trimmed since now (kernel/allocator.py, MarinaServer
    starts it), as it is every second."""
    from kernel.allocator import EVERY_SECONDS

    time.sleep(EVERY_SECONDS + 0.2)
    report.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            found: dict[str, object] = json.loads(report.read_text())
            return found
        except (OSError, ValueError):
            time.sleep(0.1)
    raise SystemExit("the worker did not report its figures")


def open_streams(port: int, request: bytes, n: int, burst: bool = False) -> list[socket.socket]:
    """n streams, each connected and sent in turn; or (burst) all connected, then all sent."""
    opened = []
    for _ in range(n):
        sock = socket.create_connection(("127.0.0.1", port))
        if not burst:
            sock.sendall(request)
        opened.append(sock)
    if burst:
        for sock in opened:
            sock.sendall(request)
    return opened


def wait_upstream(pid: int, port: int, upstream_port: int, n: int, timeout: float = 300) -> float:
    """Seconds until the worker holds n connections to the upstream (each stream's call)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if sample([pid], port, upstream_port).upstreams.get(pid, 0) >= n:
            return time.monotonic() - started
        time.sleep(0.2)
    held = sample([pid], port, upstream_port).upstreams.get(pid, 0)
    raise SystemExit(f"the worker holds {held} upstream connections, not {n}, after {timeout:.0f}s")


def wait_queued(pid: int, report: Path, n: int, timeout: float = 300) -> tuple[float, dict[str, object]]:
    """Seconds until the worker counts n requests waiting for a turn, and its figures then."""
    started = time.monotonic()
    while True:
        found = figures(pid, report)
        if int(str(found["queued"])) >= n:
            return time.monotonic() - started, found
        if time.monotonic() - started > timeout:
            raise SystemExit(f"{found['queued']} requests wait for a turn, not {n}, after {timeout:.0f}s")
        time.sleep(0.5)


def drain(clients: list[socket.socket], stop: threading.Event) -> threading.Thread:
    """A thread reading (and dropping) whatever the streams send, as a client reading them would."""
    def run() -> None:
        with selectors.DefaultSelector() as selector:
            for sock in clients:
                sock.setblocking(False)
                selector.register(sock, selectors.EVENT_READ)
            while not stop.is_set():
                for key, _ in selector.select(0.5):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    try:
                        if not sock.recv(65536):
                            selector.unregister(sock)
                    except BlockingIOError:
                        pass
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def where(before: dict[str, object], after: dict[str, object], n: int, top: int) -> None:
    """The lines that allocated what the streams hold, per stream."""
    old = tracemalloc.Snapshot.load(str(before["snapshot"]))
    new = tracemalloc.Snapshot.load(str(after["snapshot"]))
    diffs = new.compare_to(old, "lineno")
    total = sum(d.size_diff for d in diffs)
    print(f"\nPython allocations held per request (tracemalloc): {total / n / 1024:.1f} KB; "
          f"the {top} lines that allocated most of it:\n")
    print("| KB per stream | blocks per stream | allocated at |")
    print("| --- | --- | --- |")
    for d in diffs[:top]:
        frame = d.traceback[0]
        name = os.path.relpath(frame.filename, ROOT) if frame.filename.startswith(str(ROOT)) else frame.filename
        name = name.split("site-packages/")[-1]
        print(f"| {d.size_diff / n / 1024:.2f} | {d.count_diff / n:.1f} | {name}:{frame.lineno} |")
    if new.traceback_limit > 1:  # --frames: the callers of the first lines
        for d in new.compare_to(old, "traceback")[:top // 2]:
            print(f"\n{d.size_diff / n / 1024:.2f} KB, {d.count_diff / n:.1f} blocks per stream:")
            for line in d.traceback.format(most_recent_first=True)[::2][:8]:
                print("   ", line.strip().split("site-packages/")[-1])


def report_relaying(args: argparse.Namespace, before: dict[str, object], waiting: dict[str, object],
                    relaying: dict[str, object]) -> None:
    """What the streams hold once relaying, against what they held waiting (--relay)."""
    rss1, raw1 = int(str(waiting["rss_kb"])), int(str(waiting["uncollected_kb"]))
    rss2, raw2 = int(str(relaying["rss_kb"])), int(str(relaying["uncollected_kb"]))
    n = args.warm + args.streams
    print(f"\n## The same {n} streams relaying ({args.relay_after:.0f} s after the last one's first token; "
          f"load average {os.getloadavg()[0]:.2f})\n")
    print(f"Worker resident: {rss2 / 1024:.1f} MB against {rss1 / 1024:.1f} MB while they waited: "
          f"**{(rss2 - rss1) / n:+.1f} KB per stream relaying** ({(raw2 - raw1) / n:+.1f} KB before the "
          f"collections)" + (" (tracemalloc on: not comparable)" if args.where else "") + ".")
    for name, reading in (("before", before), ("waiting", waiting), ("relaying", relaying)):
        if "arenas" not in reading:
            continue  # under tracemalloc
        print(f"- pymalloc {name}: {reading['arenas']} arenas (1 MB each), "
              f"{int(str(reading['block_bytes'])) / 1048576:.1f} MB in blocks in use")
    if args.where:
        where(waiting, relaying, n, args.top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--warm", type=int, default=100, help="streams opened (and left waiting) before the first reading")
    parser.add_argument("--where", action="store_true", help="trace the worker's allocations and list what the streams hold")
    parser.add_argument("--burst", action="store_true",
                        help="connect all the --streams first, then send all their requests: the worker takes them in at once")
    parser.add_argument("--queued", action="store_true",
                        help="the worker holds all its turns first: measure requests waiting for one")
    parser.add_argument("--relay", type=float, metavar="F",
                        help="the upstream's first token after F s: read the worker again once all the streams relay")
    parser.add_argument("--relay-chunks", type=int, default=20, help="content chunks, 2 s apart, with --relay")
    parser.add_argument("--relay-after", type=float, default=7.0,
                        help="seconds after the last stream's first token to read the worker, with --relay")
    parser.add_argument("--frames", type=int, default=1, help="frames traced with --where (the callers listed when > 1)")
    parser.add_argument("--top", type=int, default=20, help="lines listed with --where")
    parser.add_argument("--marina-env", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting for Marina (repeatable)")
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    # One descriptor per stream in this client, two in the worker: raise the soft limit (inherited).
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    request_body = tau2_body.encoded(MODEL, stream=True)
    with tempfile.TemporaryDirectory(prefix="marina-waiting-") as tmpdir:
        tmp = Path(tmpdir)
        slow = ("--first-token-ms", str(args.relay * 1000), "--chunks", str(args.relay_chunks), "--gap-ms", "2000") \
            if args.relay else ("--first-token-ms", "3600000", "--chunks", "1")
        upstream, up_port = start_fake_upstream(tmp, *slow)
        marina = None
        try:
            port = free_port()
            extra = {"MARINA_SPOOL_DIR": str(tmp / "spool"), **dict(item.split("=", 1) for item in args.marina_env)}
            env = marina_env(db_url=f"sqlite:///{tmp / 'marina.sqlite3'}", upstream_port=up_port, bind=f"127.0.0.1:{port}",
                             key=KEY, extra=extra)
            env[REPORT] = str(tmp / "figures.json")
            env["DJANGO_SETTINGS_MODULE"] = "marina.settings"
            if args.where:
                env["PYTHONTRACEMALLOC"] = str(args.frames)
            migrate(env)
            marina = start("marina", [sys.executable, str(Path(__file__).resolve()), "--serve", str(port)], env=env,
                           base_url=f"http://127.0.0.1:{port}", ready_path="/v1/health", log_dir=tmp)
            pid = marina.proc.pid
            base = figures(pid, Path(env[REPORT]))
            request = (
                b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:%d\r\ncontent-type: application/json\r\n"
                b"authorization: Bearer %s\r\ncontent-length: %d\r\n\r\n%s"
                % (port, KEY.encode(), len(request_body), request_body)
            )
            opened_at = time.monotonic()
            clients = open_streams(port, request, args.warm)
            wait_upstream(pid, port, up_port, args.warm)
            time.sleep(1.0)
            before = figures(pid, Path(env[REPORT]))
            if args.queued:
                os.kill(pid, signal.SIGUSR2)
                time.sleep(0.5)
            started = time.monotonic()
            clients += open_streams(port, request, args.streams, burst=args.burst)
            last_opened = time.monotonic()
            stop = threading.Event()
            if args.relay:
                drain(clients, stop)
            if args.queued:
                took, _ = wait_queued(pid, Path(env[REPORT]), args.streams)
                what, until = "request waiting for its turn", "all waited for a turn"
            else:
                took = wait_upstream(pid, port, up_port, args.warm + args.streams)
                what, until = "waiting stream", "all had called the upstream"
            time.sleep(2.0)
            after = figures(pid, Path(env[REPORT]))
            after_at = time.monotonic()
            rss0, rss1 = int(str(before["rss_kb"])), int(str(after["rss_kb"]))
            print(f"\n## {'Requests waiting for their turn' if args.queued else 'Streams waiting for their first token'}"
                  f" ({args.streams} after {args.warm}; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f})\n")
            print(f"Worker resident: {int(str(base['rss_kb'])) / 1024:.1f} MB before the first request (its base), "
                  f"{rss0 / 1024:.1f} MB with {args.warm} streams waiting, {rss1 / 1024:.1f} MB with "
                  f"{args.streams} more ({time.monotonic() - started:.1f} s to open them, {took:.1f} s until "
                  f"{until}): **{(rss1 - rss0) / args.streams:.1f} KB per {what}**"
                  + (" (tracemalloc on: not comparable)" if args.where else "") + ".")
            raw0, raw1 = int(str(before["uncollected_kb"])), int(str(after["uncollected_kb"]))
            print(f"Before the collections: {raw0 / 1024:.1f} and {raw1 / 1024:.1f} MB, {(raw1 - raw0) / args.streams:.1f} KB each "
                  "(what the worker held until its collector's next full pass; the previous reading's collection in between).")
            if args.where:
                where(before, after, args.streams, args.top)
            if args.relay:
                if after_at - opened_at > args.relay:
                    print("\n(the first streams had their first token before the streams were all waiting: "
                          "raise --relay)")
                time.sleep(max(0.0, last_opened + args.relay + args.relay_after - time.monotonic()))
                report_relaying(args, before, after, figures(pid, Path(env[REPORT])))
                stop.set()
            log = marina.log.read_text(errors="replace")
            problems = [ln for ln in log.splitlines() if "WARNING" in ln or "ERROR" in ln or "Traceback" in ln]
            if problems:
                print("\nThe worker's log (warnings and errors, first 5):\n" + "\n".join(problems[:5]))
            for sock in clients:
                sock.close()
        finally:
            # The streams would wait an hour: no graceful stop.
            for server in (marina, upstream):
                if server is not None and server.proc.poll() is None:
                    server.proc.kill()
                    try:
                        server.proc.wait(10)
                    except subprocess.TimeoutExpired:
                        pass


if __name__ == "__main__":
    main()
