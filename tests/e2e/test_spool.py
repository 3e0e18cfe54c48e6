"""Nothing answered goes unrecorded when the database has a bad moment
(issue 24; docs/reliability.md, "The ledger's spool").

A throw-away PostgreSQL cluster is killed (`pg_ctl -m immediate stop`) under
load and started again seconds later: every call answered 200 is a trace,
once, and spend_daily holds exactly what the clients were told in their cost
headers. Then the workers are killed (-9) while they replay their journals:
the workers gunicorn starts in their place replay what is left, and the
counts are still exact (nothing twice, nothing missing)."""
from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from tests.conftest import MARINA_KEY
from tests.e2e.load import Outcome, cost_nanousd, priced_handler, run_load, summary
from tests.e2e.pgcluster import Cluster
from tests.e2e.servers import Gunicorn, Ledger

pytestmark = pytest.mark.e2e


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    pg = Cluster()
    try:
        yield pg
    finally:
        pg.remove()


def _wait_for_traces(ledger: Ledger, count: int, seconds: float = 60) -> int:
    deadline = time.monotonic() + seconds
    found = -1
    while time.monotonic() < deadline:
        try:
            found = int(ledger.one("SELECT COUNT(*) FROM ledger_trace"))
        except Exception:  # the database restarting
            found = -1
        if found >= count:
            return found
        time.sleep(0.2)
    return found


def _assert_exact(ledger: Ledger, outcomes: list[Outcome]) -> None:
    answered = [o for o in outcomes if o.status == 200]
    assert all(o.ok for o in answered), summary(outcomes)
    plain = [o for o in answered if o.kind == "plain"]
    # What the clients were told: the cost header on plain replies (streams
    # carry no header; their cost is the upstream's, known from the index).
    told = sum(o.header_cost_nanousd or 0 for o in plain) + sum(cost_nanousd(o.index) for o in answered if o.kind == "stream")
    assert all(o.header_cost_nanousd == cost_nanousd(o.index) for o in plain)
    assert _wait_for_traces(ledger, len(answered)) == len(answered)
    time.sleep(1.5)  # a replay that would write something twice has had time to
    totals = ledger.totals()
    assert totals["traces"] == len(answered), (totals, summary(outcomes))
    assert totals["spans"] == totals["spend_calls"] == len(answered)
    assert totals["spend_cost"] == totals["span_cost"] == totals["trace_cost"] == told
    ids = {row[0] for row in ledger.rows("SELECT request_id FROM ledger_trace")}
    assert ids == {o.request_id for o in answered}


def _load(server: Gunicorn, requests: int, concurrency: int = 8, stop: Callable[[], bool] | None = None) -> list[Outcome]:
    return asyncio.run(
        run_load([server.base_url], MARINA_KEY, concurrency=concurrency, requests=requests, kinds=("plain", "stream"), stop=stop)
    )


def test_postgres_killed_under_load_loses_no_trace_and_no_spend(cluster, servers, upstream):
    upstream.handler = priced_handler()
    ledger = cluster.database()
    server = servers.start(ledger, workers=2)
    outage: dict[str, float] = {}

    def kill_and_restart() -> None:
        time.sleep(1.5)
        cluster.kill()
        outage["down"] = time.monotonic()
        time.sleep(5)
        cluster.start()
        outage["up"] = time.monotonic()

    fault = threading.Thread(target=kill_and_restart)
    fault.start()
    # Calls go on until 2 s after the database is back (at most 5,000).
    outcomes = _load(server, 5000, stop=lambda: "up" in outage and time.monotonic() > outage["up"] + 2)
    fault.join()

    during = [o for o in outcomes if outage["down"] < o.started < outage["up"]]
    assert during, "no call was sent while the database was down (the load ended too soon)"
    assert all(o.status == 200 for o in outcomes), summary(outcomes)
    _assert_exact(ledger, outcomes)
    assert "could not record trace" not in server.log()


def test_workers_killed_during_a_replay_leave_it_to_the_next(cluster, servers, upstream):
    upstream.handler = priced_handler()
    ledger = cluster.database()
    server = servers.start(ledger, workers=2)
    first = _load(server, 40)  # the workers have connections to lose
    assert _wait_for_traces(ledger, 40) == 40

    cluster.kill()
    down = _load(server, 600, concurrency=16)  # all spooled
    assert all(o.status == 200 for o in down), summary(down)
    workers = server.worker_pids()
    cluster.start()
    # Kill -9 every worker as soon as the first replayed batch is committed.
    deadline = time.monotonic() + 30
    seen = 40
    while time.monotonic() < deadline:
        try:
            seen = int(ledger.one("SELECT COUNT(*) FROM ledger_trace"))
        except Exception:
            seen = 40
        if seen > 40:
            break
        time.sleep(0.005)
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    assert 40 < seen < 640, f"the kill did not land in the middle of the replay ({seen} traces)"

    _assert_exact(ledger, first + down)
    assert "left by a process that ended" in server.log()
