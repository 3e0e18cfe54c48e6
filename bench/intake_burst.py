"""What it costs an application to take a burst of streams in, the ASGI
server and the client's sockets left out: a burst of streamed τ²-sized calls
handed to the application in this process at once, the CPU this process
spends until the last of them is written to the upstream (bench/fake_upstream.py,
in a process of its own, silent for 120 s so that no stream is answered
meanwhile).

    .venv/bin/python bench/intake_burst.py                     # Marina and the floor, 3,000 streams, 5 rounds each
    .venv/bin/python bench/intake_burst.py --targets marina --callgrind   # and instructions a stream

Why (docs/performance.md, issue 45): under `bench/slow_streams.py` a stream's
intake is Marina's application, uvicorn and the kernel's sockets together, and
a 10,000-stream run takes minutes with a spread between runs as large as most
changes. Here a round takes seconds, and the two targets alternate in one
process's life: Marina's ASGI application (marina/asgi.py, with its ledger on
SQLite and its daily cap on) and bench/floor.py's framework-free gateway. Each
round's figure is CPU seconds (`time.process_time`: every thread, the
ledger's too) over the streams, split into user and system time; the median of
the rounds is printed per target. `--callgrind` runs one round of each target
again under valgrind and prints instructions a stream (repeatable whatever the
machine's load; valgrind does not run the CPU's SHA extensions, so hashing
counts for more there than in time).

What is left out is the same for both: the HTTP parsing of the request, the
accept and the client socket's reads. The streams are cancelled after each
round (Marina drains nothing: `MARINA_DRAIN_AFTER_DISCONNECT_SECONDS=0`)."""
from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tau2_body
from common import (
    ROOT,
    asgi_call,
    chat_scope,
    count_instructions,
    instructions_counted,
    marina_env,
    migrate,
    start_fake_upstream,
    under_callgrind,
)

KEY = "sk-marina-bench-key-0000"
MODEL = "openai/gpt-4.1-mini"
SILENCE_MS = 120_000  # the upstream's silence: longer than any round


class Written:
    """Counts upstream requests written, by wrapping the function that writes them."""

    def __init__(self) -> None:
        self.count = 0

    def around_async(self, write: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def counted(*args: Any, **kwargs: Any) -> Any:
            result = await write(*args, **kwargs)
            self.count += 1
            return result
        return counted

    def around(self, write: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return write(*args, **kwargs)
        return counted


def marina_app(written: Written) -> Any:
    import marina.asgi  # sets Django up: before the module below, whose imports need it
    from passthru import upstream

    upstream._start = written.around_async(upstream._start)  # the POST written to the provider
    return marina.asgi.application


def floor_app(written: Written, upstream_port: int) -> Any:
    os.environ["FLOOR_UPSTREAM"] = f"127.0.0.1:{upstream_port}"
    import floor

    floor._post = written.around(floor._post)  # the request's bytes, made just before they are written
    return floor.app


async def burst(app: Any, written: Written, body: bytes, n: int, under_callgrind: bool) -> tuple[float, float, float]:
    """(CPU, user, system seconds) to write n streams' requests upstream."""
    scope = chat_scope(body, KEY)
    written.count = 0
    gc.collect()
    gc.disable()  # as a worker runs (kernel/collector.py defers collections in a burst)
    if under_callgrind:
        count_instructions(True)
    cpu, usage = time.process_time(), resource.getrusage(resource.RUSAGE_SELF)
    tasks = [asyncio.ensure_future(asgi_call(app, dict(scope), body, lambda message: None)) for _ in range(n)]
    answered = [0]  # requests answered before the round ends: each without its upstream, an error
    for task in tasks:
        task.add_done_callback(lambda _: answered.__setitem__(0, answered[0] + 1))
    deadline = time.monotonic() + 60
    while written.count < n:
        if answered[0] or time.monotonic() > deadline:
            sys.exit(f"intake_burst: {written.count} of {n} requests reached the upstream, {answered[0]} answered without it")
        await asyncio.sleep(0.005)
    cpu, after = time.process_time() - cpu, resource.getrusage(resource.RUSAGE_SELF)
    if under_callgrind:
        count_instructions(False)
    gc.enable()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.sleep(1.0)  # the cancelled streams' traces written, their connections closed
    return cpu, after.ru_utime - usage.ru_utime, after.ru_stime - usage.ru_stime


def child(args: argparse.Namespace, upstream_port: int, under_callgrind: bool) -> None:
    """The rounds, in this process: both targets' applications loaded, alternated."""
    import uvloop

    sys.path.insert(0, str(ROOT))  # Marina's packages (this script's own folder is first)
    written = Written()
    apps = {}
    for target in args.targets.split(","):
        apps[target] = marina_app(written) if target == "marina" else floor_app(written, upstream_port)
    body = tau2_body.encoded(MODEL, stream=True)

    async def run() -> None:
        for app in apps.values():
            await burst(app, written, body, 200, False)  # imports, pools, price tables
        for round_ in range(1 if under_callgrind else args.rounds):
            for target, app in apps.items():
                cpu, user, system = await burst(app, written, body, args.streams, under_callgrind)
                print(f"ROUND {target} {round_} {cpu / args.streams * 1000:.4f} {user / args.streams * 1000:.4f} "
                      f"{system / args.streams * 1000:.4f}", flush=True)
                if under_callgrind:
                    return  # one target a valgrind run: its counts are the whole file's

    uvloop.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=3000, help="streams a round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--targets", default="marina,floor", help="of marina, floor")
    parser.add_argument("--callgrind", action="store_true", help="and instructions a stream, under valgrind")
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)  # the upstream's port
    parser.add_argument("--under-callgrind", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    unknown = set(args.targets.split(",")) - {"marina", "floor"}
    if unknown:
        parser.error(f"--targets: no target {', '.join(sorted(unknown))} (marina, floor)")
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.child:
        child(args, args.child, args.under_callgrind)
        return
    tmp = Path(tempfile.mkdtemp(prefix="marina-intake-"))
    upstream, port = start_fake_upstream(tmp, "--first-token-ms", str(SILENCE_MS), "--chunks", "1")
    env = marina_env(db_url=f"sqlite:///{tmp / 'intake.sqlite3'}", upstream_port=port, bind="127.0.0.1:0", key=KEY,
                     extra={"MARINA_UPSTREAM_MAX_CONNECTIONS": str(args.streams + 200),
                            "MARINA_DRAIN_AFTER_DISCONNECT_SECONDS": "0",
                            "DJANGO_SETTINGS_MODULE": "marina.settings"})
    try:
        migrate(env)
        me = [sys.executable, str(Path(__file__).resolve()), "--streams", str(args.streams), "--rounds", str(args.rounds),
              "--child", str(port)]
        rows: dict[str, list[tuple[float, float, float]]] = {}
        for line in _run(me + ["--targets", args.targets], env, tmp):
            _, target, _, cpu, user, system = line.split()
            rows.setdefault(target, []).append((float(cpu), float(user), float(system)))
        instructions: dict[str, float] = {}
        if args.callgrind:
            for target in args.targets.split(","):
                out = tmp / f"callgrind-{target}.out"
                _run([*under_callgrind(out), *me, "--targets", target, "--under-callgrind"], env, tmp)
                instructions[target] = instructions_counted(out) / args.streams
    finally:
        upstream.stop()
    print(f"\n## A burst of {args.streams} streams taken in, in one process ({args.rounds} rounds a target, "
          f"alternated; {os.cpu_count()} cores)\n")
    print("| target | CPU ms a stream, per round | median | user / system, median | instructions a stream |")
    print("| --- | --- | --- | --- | --- |")
    for target, values in rows.items():
        cpus = [v[0] for v in values]
        count = f"{instructions[target] / 1e6:.2f} M" if target in instructions else "—"
        print(f"| {target} | {', '.join(f'{c:.3f}' for c in cpus)} | **{statistics.median(cpus):.3f}** | "
              f"{statistics.median(v[1] for v in values):.3f} / {statistics.median(v[2] for v in values):.3f} | {count} |")


def _run(cmd: list[str], env: dict[str, str], tmp: Path) -> list[str]:
    """Run this script's child (`cmd`) from the project's root; its ROUND lines."""
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        (tmp / "child.log").write_text(done.stdout + done.stderr)
        sys.exit(f"intake_burst: the child failed (exit {done.returncode}); its output: {tmp / 'child.log'}")
    return [line for line in done.stdout.splitlines() if line.startswith("ROUND ")]


if __name__ == "__main__":
    main()
