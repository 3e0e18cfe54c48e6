"""The priced scripted upstream in a process of its own, for load runs.

Under load, a threaded upstream inside the test process competes for one
GIL with the load client: the client then measures itself, not Marina. Run
apart, each gets a core.

    python -m tests.e2e.upstream_process [--cost normal|tiny|cap] [--delay S]

prints `ready <base_url>` on stdout, then serves until SIGTERM/SIGINT or EOF
on stdin. It records nothing (a long soak would hold every request in memory).
"""
from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.e2e.load import cap_test_cost_nanousd, cost_nanousd, priced_handler, tiny_cost_nanousd
from tests.upstream import ScriptedUpstream

PROJECT_ROOT = Path(__file__).resolve().parents[2]
COSTS = {"normal": cost_nanousd, "tiny": tiny_cost_nanousd, "cap": cap_test_cost_nanousd}


class _Unrecorded(ScriptedUpstream):
    def __init__(self) -> None:
        super().__init__()
        self.requests = _Discard()


class _Discard(list):
    def append(self, item: Any) -> None:
        pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cost", choices=sorted(COSTS), default="normal")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each reply's first byte")
    args = parser.parse_args(argv)
    server = _Unrecorded().start()
    server.handler = priced_handler(COSTS[args.cost], delay=args.delay)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    print(f"ready {server.base_url}", flush=True)
    done.wait()
    server.stop()


@contextmanager
def upstream_process(*, cost: str = "normal", delay: float = 0.0) -> Iterator[str]:
    """Run the priced upstream in a child process; yields its base URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.e2e.upstream_process", "--cost", cost, "--delay", str(delay)],
        cwd=PROJECT_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("ready "):
            raise RuntimeError(f"the upstream process did not start: {line!r}")
        yield line.split()[1]
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
