"""An opt-in pytest plugin (`-p tests.cputime`): each test's CPU time, its own
process's and that of the interpreters it starts (`os.times()` around it), with
its wall time, per file and for the slowest tests (under pytest-xdist, each
worker's tests gathered by the controller). On a shared machine wall time
moves with the neighbours' load and CPU time does not (docs/performance.md, "The
test suite")."""
from __future__ import annotations

import collections
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

_rows: list[tuple[str, float, float, float]] = []


def _now() -> tuple[float, float, float]:
    t = os.times()
    return time.perf_counter(), t.user + t.system, t.children_user + t.children_system


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    before = _now()
    yield
    after = _now()
    _rows.append((item.nodeid, after[0] - before[0], after[1] - before[1], after[2] - before[2]))


def pytest_sessionfinish(session: pytest.Session) -> None:
    # Under pytest-xdist each worker measures its own tests and hands its rows to the controller.
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["cputime"] = _rows


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook
def pytest_testnodedown(node: Any, error: object) -> None:
    _rows.extend(tuple(row) for row in getattr(node, "workeroutput", {}).get("cputime", ()))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if hasattr(terminalreporter.config, "workeroutput"):
        return
    write = terminalreporter.write_line
    files: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for nodeid, wall, cpu, children in _rows:
        totals = files[nodeid.split("::")[0]]
        totals[0] += 1
        totals[1] += wall
        totals[2] += cpu
        totals[3] += children
    write("== CPU per file: tests, wall s, CPU s (this process), CPU s (interpreters it started)")
    for name, (count, wall, cpu, children) in sorted(files.items(), key=lambda kv: -(kv[1][2] + kv[1][3])):
        write(f"{name:70} {count:4.0f} {wall:8.1f} {cpu:7.1f} {children:7.1f}")
    write("== the 40 tests with the most CPU: CPU s, wall s")
    for nodeid, wall, cpu, children in sorted(_rows, key=lambda r: -(r[2] + r[3]))[:40]:
        write(f"{cpu + children:6.2f} {wall:7.2f}  {nodeid}")
    write(f"== total: wall {sum(r[1] for r in _rows):.1f} s, CPU {sum(r[2] + r[3] for r in _rows):.1f} s")
