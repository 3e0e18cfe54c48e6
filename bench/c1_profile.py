"""Where a call's CPU goes at c=1, in measures that hold on a loaded machine:
CPU seconds per request and instructions per request, and a sampled profile
split into the stages of the request path.

    .venv/bin/python bench/c1_profile.py                                   # SQLite, plain calls, 10 s of wrk
    .venv/bin/python bench/c1_profile.py --mode stream --database postgres
    .venv/bin/python bench/c1_profile.py --py-spy /tmp/pyspy-venv/bin/py-spy   # and where (a sampled profile)
    .venv/bin/python bench/c1_profile.py --callgrind 300                   # and instructions per request

Three measures, each of the same call (the τ²-sized body, `openai/gpt-4.1-mini`
priced, the fake upstream answering at once):

1. **The server**: Marina as the README starts it but with one worker
   (gunicorn, uvicorn), `wrk -c 1` (`--connections`) for `--seconds`. CPU per request is the
   worker's user+system time over the requests wrk completed (/proc), so a
   neighbour's load does not enter it (wall latency would).
2. **The application alone**: Marina's ASGI application called in this process,
   back to back (no gunicorn, no uvicorn, no client socket), CPU per request
   from `time.process_time()` (every thread: the ledger writer's too). The
   difference from 1 is the ASGI server's share (uvicorn's protocol, the
   client socket's system calls).
3. `--callgrind N`: the same in-process calls under valgrind's callgrind,
   instrumentation switched on for N calls after the warm-up only: instructions
   per request, which do not move with the machine's load (the c=1 figure to
   compare before and after a change; valgrind runs it ~50× slower).

With `--py-spy PATH` (py-spy is not a requirement: `pip install py-spy` into
any virtualenv) the worker of 1 is sampled for the whole run and each sample is
put in the stage of its innermost frame that names one (STAGES, below): the
table gives each stage's share of the worker's samples and so its CPU ms per
request. Samples of the ledger writer's thread are a stage of their own. With
`--gil`, only the thread holding the GIL is sampled: CPU, never waiting, but a
call that releases the GIL (SQLite's statements and commit) is missed."""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tau2_body
from common import (
    ROOT,
    asgi_call,
    chat_scope,
    children,
    count_instructions,
    cpu_seconds,
    ensure_wrk,
    free_port,
    instructions_counted,
    marina_env,
    migrate,
    scratch_postgres,
    start,
    start_fake_upstream,
    under_callgrind,
)

KEY = "sk-marina-bench-key-0000"
MODEL = "openai/gpt-4.1-mini"
BENCH = Path(__file__).resolve().parent
PG_ADMIN = os.environ.get("MARINA_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432")

# A sample's stage is that of its innermost frame matching one of these (file
# path fragment, function name or "" for any), tried in this order for each
# frame from the leaf outwards. The ledger writer's thread is told apart by its
# outermost Marina frame.
STAGES: list[tuple[str, str, str]] = [
    ("auth (key lookup)", "passthru/auth.py", ""),
    ("rate limit", "passthru/ratelimit.py", ""),
    ("spend cap (hold, release)", "passthru/spendcap.py", ""),
    ("pricing (genai-prices)", "passthru/pricing.py", ""),
    ("pricing (genai-prices)", "genai_prices/", ""),
    ("body parse and checks", "", "parse_body"),
    ("body parse and checks", "", "parse_model_body"),
    ("conversation id", "kernel/conversation.py", ""),
    ("ledger hand-off (trace built, awaited)", "passthru/lifecycle.py", "finish"),
    ("ledger hand-off (trace built, awaited)", "kernel/dbwriter.py", ""),
    ("ledger hand-off (trace built, awaited)", "ledger/", ""),
    ("upstream client (request, wire, reply)", "passthru/upstream.py", ""),
    ("upstream client (request, wire, reply)", "passthru/wire.py", ""),
    ("upstream client (request, wire, reply)", "passthru/calls.py", ""),
    ("upstream client (request, wire, reply)", "passthru/fallback.py", ""),
    ("upstream client (request, wire, reply)", "httpx/", ""),
    ("chat door (the rest)", "passthru/", ""),
    ("Ninja dispatch", "ninja/", ""),
    ("Django handler (request, middleware, response)", "django/", ""),
    ("Django handler (request, middleware, response)", "marina/mounts.py", ""),
    ("ASGI server (uvicorn, httptools)", "uvicorn/", ""),
    ("ASGI server (uvicorn, httptools)", "marina/worker.py", ""),
]
# Leaf frames where a thread waits (or runs uvloop's C code: the loop's polling
# and its socket writes, which py-spy cannot tell from waiting without native
# stacks): left out of the stages.
WAITING = ("Runner.run (asyncio/runners.py", "_worker (concurrent/futures/thread.py", "_ticking (passthru/spendcap.py")
FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")


def stage_of(frames: list[str]) -> str:
    thread = frames[0]
    if "ledger" in thread:
        return "ledger writer thread (the commit)"
    if "spendcap" in thread:
        return "spend cap's threads"
    for frame in reversed(frames):  # from the leaf outwards
        m = FRAME.match(frame)
        func, file = (m["func"], m["file"]) if m else (frame, "")
        for name, part, function in STAGES:
            if (not part or part in file) and (not function or function == func):
                return name
    return "event loop and the rest"


def split_profile(raw: Path) -> Counter[str]:
    """py-spy's raw (collapsed) output, recorded with --threads: samples per stage."""
    counts: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        if not frames[-1].startswith(WAITING):
            counts[stage_of(frames)] += int(n)
    return counts


def run_wrk(url: str, body: Path, seconds: float, connections: int = 1) -> dict[str, Any]:
    out = subprocess.run([ensure_wrk(), "-t1", f"-c{connections}", f"-d{int(seconds)}s", "--latency", "-s", str(BENCH / "wrk_post.lua"),
                          url, "--", str(body), KEY], capture_output=True, text=True, check=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("WRKJSON "))
    return json.loads(line.removeprefix("WRKJSON "))


def server_profile(args: argparse.Namespace, db_url: str, tmp: Path, up_port: int) -> dict[str, Any]:
    port = free_port()
    env = marina_env(db_url=db_url, upstream_port=up_port, bind=f"127.0.0.1:{port}", key=KEY,
                     extra={"MARINA_WORKERS": "1"})
    migrate(env)
    server = start("marina", [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "gunicorn.conf.py"),
                              "marina.asgi:application"], env=env, base_url=f"http://127.0.0.1:{port}",
                   ready_path="/v1/health", log_dir=tmp)
    try:
        body = tmp / "body.json"
        body.write_bytes(tau2_body.encoded(args.model, stream=args.mode == "stream"))
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        run_wrk(url, body, 2)  # imports, pools, price tables
        (worker,) = children(server.proc.pid)
        spy = None
        if args.py_spy:
            spy = subprocess.Popen([args.py_spy, "record", "-p", str(worker), "-r", "1000", "--threads", "--nonblocking",
                                    *(["--gil"] if args.gil else []),
                                    "-f", "raw", "-o", str(tmp / "profile.txt"), "-d", str(int(args.seconds) + 1)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
        cpu0 = cpu_seconds([worker])
        result = run_wrk(url, body, args.seconds, args.connections)
        cpu = cpu_seconds([worker]) - cpu0
        if spy is not None:
            spy.wait()
        result["cpu_ms"] = cpu * 1000 / max(1, result["requests"])
        if spy is not None and (tmp / "profile.txt").exists():
            result["stages"] = split_profile(tmp / "profile.txt")
            if args.raw:
                shutil.copy(tmp / "profile.txt", args.raw)
        return result
    finally:
        server.stop()


def inproc(args: argparse.Namespace, db_url: str, tmp: Path, up_port: int) -> dict[str, Any]:
    """Run this script again in a child process, calling the application in it (under valgrind with --callgrind)."""
    env = marina_env(db_url=db_url, upstream_port=up_port, bind="127.0.0.1:0", key=KEY)
    migrate(env)
    env.update({"DJANGO_SETTINGS_MODULE": "marina.settings", "PYTHONHASHSEED": "0"})
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(args.requests), "--mode", args.mode, "--model", args.model]
    if args.callgrind:
        out_file = tmp / "callgrind.out"
        cmd = [*under_callgrind(out_file), *cmd[:2],
               "--child", str(args.callgrind), "--mode", args.mode, "--model", args.model, "--under-callgrind"]
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the in-process run failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if args.callgrind:
        result["instructions"] = instructions_counted(tmp / "callgrind.out") / args.callgrind
    return result


def child(n: int, mode: str, model: str, under_callgrind: bool) -> None:
    """In-process calls of the application: n measured after 300 to warm up."""
    sys.path.insert(0, str(ROOT))
    from marina.asgi import application

    body = tau2_body.encoded(model, stream=mode == "stream")
    scope = chat_scope(body, KEY)
    statuses: Counter[int] = Counter()

    def count(message: Mapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses[message["status"]] += 1

    async def one() -> None:
        await asgi_call(application, scope, body, count)

    async def run() -> dict[str, Any]:
        for _ in range(300 if not under_callgrind else 50):
            await one()
        if under_callgrind:
            count_instructions(True)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for _ in range(n):
            await one()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        if under_callgrind:
            count_instructions(False)
        return {"requests": n, "cpu_ms": cpu * 1000 / n, "wall_ms": wall * 1000 / n, "statuses": dict(statuses)}

    import uvloop

    print(json.dumps(uvloop.run(run())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["plain", "stream"], default="plain")
    parser.add_argument("--model", default=MODEL,
                        help=f"the body's model id (default {MODEL}, priced; e.g. openai/marina-bench-unpriced-model)")
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--seconds", type=float, default=10, help="wrk's run against the one-worker server")
    parser.add_argument("--requests", type=int, default=2000, help="in-process calls measured")
    parser.add_argument("--py-spy", default=shutil.which("py-spy") or "", help="py-spy's path: profile the worker")
    parser.add_argument("--callgrind", type=int, default=0, metavar="N", help="instructions per request over N calls")
    parser.add_argument("--raw", type=Path, help="keep py-spy's raw profile in this file")
    parser.add_argument("--gil", action="store_true",
                        help="sample only the thread holding the GIL (where py-spy takes sleeping threads for running ones)")
    parser.add_argument("--connections", type=int, default=1, help="wrk's connections (the server's run only)")
    parser.add_argument("--skip-server", action="store_true")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--under-callgrind", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.child, args.mode, args.model, args.under_callgrind)
        return
    with tempfile.TemporaryDirectory(prefix="marina-c1-") as tmpdir:
        tmp = Path(tmpdir)
        upstream, up_port = start_fake_upstream(tmp, "--gap-ms", "1")
        try:
            if args.database == "postgres":
                with scratch_postgres(PG_ADMIN, "marina_c1") as url:
                    measure(args, url, tmp, up_port)
            else:
                measure(args, f"sqlite:///{tmp / 'c1.sqlite3'}", tmp, up_port)
        finally:
            upstream.stop()


def measure(args: argparse.Namespace, db_url: str, tmp: Path, up_port: int) -> None:
    load = os.getloadavg()[0]
    print(f"\n## One call at a time, {args.mode}, {args.database} (load average {load:.2f} at the start)\n")
    if not args.skip_server:
        s = server_profile(args, db_url, tmp, up_port)
        print(f"Server (gunicorn, 1 worker), wrk -c {args.connections} for {args.seconds:g} s: {s['requests']} requests, "
              f"p50 {s['p50_us'] / 1000:.2f} ms, worker CPU **{s['cpu_ms']:.3f} ms per request**.")
        if "stages" in s:
            total = sum(s["stages"].values())
            print(f"\nWhere the worker's threads ran ({total} samples at 1 kHz, waiting left out; a stage's CPU is its "
                  "share of the samples × the worker's CPU per request, its system calls included):\n")
            print("| stage | share | CPU ms per request |")
            print("| --- | --- | --- |")
            for name, n in s["stages"].most_common():
                print(f"| {name} | {n / total:.1%} | {n / total * s['cpu_ms']:.3f} |")
    p = inproc(args, db_url, tmp, up_port)
    print(f"\nApplication in-process, {p['requests']} calls back to back: CPU **{p['cpu_ms']:.3f} ms per request** "
          f"(wall {p['wall_ms']:.3f} ms; statuses {p['statuses']})"
          + (f"; **{p['instructions'] / 1e6:.2f} M instructions per request** (callgrind)" if "instructions" in p else ""))
    if not args.skip_server:
        print(f"ASGI server's share (server's CPU less the application's): {s['cpu_ms'] - p['cpu_ms']:.3f} ms per request")


if __name__ == "__main__":
    main()
