"""Issue 6's load check, CI-sized: concurrency 128 for a few seconds (the
60-second run is bench/soak.py), plain, streamed and tool-call requests mixed.
Every request is answered, and requests sent = traces = spend_daily calls,
with the cost exact to the nano-dollar."""
from __future__ import annotations

import asyncio
import os

import pytest

from tests.conftest import MARINA_KEY
from tests.e2e.load import cost_nanousd, run_load, summary
from tests.e2e.upstream_process import upstream_process

SECONDS = float(os.environ.get("MARINA_E2E_LOAD_SECONDS", "12"))

pytestmark = pytest.mark.e2e


def check_ledger_matches(outcomes, ledger) -> None:
    """Sent = answered = traced = counted in spend_daily, with the exact cost."""
    assert all(o.ok for o in outcomes), summary(outcomes)
    totals = ledger.totals()
    sent = len(outcomes)
    assert totals["traces"] == totals["spans"] == totals["spend_calls"] == sent, (totals, sent)
    expected = sum(cost_nanousd(o.index) for o in outcomes)
    assert totals["spend_cost"] == totals["span_cost"] == totals["trace_cost"] == expected
    headers = [o for o in outcomes if o.kind != "stream"]
    assert sum(o.header_cost_nanousd or 0 for o in headers) == sum(cost_nanousd(o.index) for o in headers)
    traced = {r[0] for r in ledger.rows("SELECT request_id FROM ledger_trace")}
    assert traced == {o.request_id for o in outcomes}


def test_concurrency_128_mixed_load_is_answered_and_counted_exactly(servers):
    with upstream_process() as upstream_url:
        server = servers.start(MARINA_OPENROUTER_BASE_URL=upstream_url)
        workers = server.worker_pids()
        outcomes = asyncio.run(run_load([server.base_url], MARINA_KEY, concurrency=128, seconds=SECONDS))

    print("load:", summary(outcomes))
    assert len(outcomes) >= 128, "the run was too short to load 128 connections"
    assert {o.kind for o in outcomes} == {"plain", "stream", "tools"}
    check_ledger_matches(outcomes, server.ledger)
    assert server.worker_pids() == workers, "a worker died under load"
