"""A worker's memory while every call fails: Marina's provider on a port where
nothing listens, τ²-sized calls at c=32 (`wrk`), each worker's resident
memory read every 5 s (docs/performance.md, 2026-12-07).

A failed call must leave nothing for the cycle collector to find: a worker
runs it on a clock of its own (kernel/collector.py), and an error kept where
its traceback's frames could reach it held the whole request (its body, its
context) until the collector's next pass: 332 MB in the busier worker with
CPython's collector, 667 MB with the worker's, against 91 MB once those
cycles were broken.

    .venv/bin/python bench/failing_calls.py                  # plain calls, 30 s
    .venv/bin/python bench/failing_calls.py --stream --seconds 60
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tau2_body
from c1_profile import KEY, MODEL, run_wrk
from common import ROOT, children, free_port, marina_env, migrate, rss_mb, start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--stream", action="store_true", help="streamed calls")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="marina-failing-") as tmpdir:
        tmp = Path(tmpdir)
        port = free_port()
        env = marina_env(db_url=f"sqlite:///{tmp / 'marina.sqlite3'}", upstream_port=free_port(),  # nothing listens there
                         bind=f"127.0.0.1:{port}", key=KEY)
        migrate(env)
        marina = start("marina", [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "gunicorn.conf.py"),
                                  "marina.asgi:application"],
                       env=env, base_url=f"http://127.0.0.1:{port}", ready_path="/v1/health", log_dir=tmp)
        try:
            body = tmp / "body.json"
            body.write_bytes(tau2_body.encoded(MODEL, stream=args.stream))
            workers = children(marina.proc.pid)
            print(f"idle: {', '.join(f'{rss_mb(p):.0f}' for p in workers)} MB a worker")
            result: dict[str, object] = {}
            load = threading.Thread(target=lambda: result.update(run_wrk(
                f"http://127.0.0.1:{port}/v1/chat/completions", body, args.seconds, args.connections)))
            load.start()
            peak = {p: 0.0 for p in workers}
            started = time.monotonic()
            while load.is_alive():
                load.join(5)
                now = {p: rss_mb(p) for p in workers}
                peak = {p: max(peak[p], now[p]) for p in workers}
                print(f"{time.monotonic() - started:4.0f} s: {', '.join(f'{now[p]:.0f}' for p in workers)} MB")
            print(f"wrk: {result.get('requests')} calls, {result.get('status')} answered with an error status")
            print(f"peak: {', '.join(f'{peak[p]:.0f}' for p in workers)} MB a worker; after the load: "
                  f"{', '.join(f'{rss_mb(p):.0f}' for p in workers)} MB")
        finally:
            marina.stop()


if __name__ == "__main__":
    main()
