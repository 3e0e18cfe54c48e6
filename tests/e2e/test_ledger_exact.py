"""Issue 2's end-to-end check: 200 requests at concurrency 50 through a real
gunicorn (2 workers), streamed and plain mixed, leave exactly 200 traces,
spend_daily calls summing to 200 and the exact cost."""
from __future__ import annotations

import asyncio

import pytest

from tests.conftest import MARINA_KEY
from tests.e2e.load import cost_nanousd, priced_handler, run_load, summary

pytestmark = pytest.mark.e2e


def test_200_requests_at_concurrency_50_are_all_counted_and_priced_exactly(servers, upstream):
    upstream.handler = priced_handler()
    server = servers.start()

    outcomes = asyncio.run(run_load([server.base_url], MARINA_KEY, concurrency=50, requests=200, kinds=("plain", "stream")))

    assert [o.index for o in outcomes] == list(range(200))
    assert all(o.ok for o in outcomes), summary(outcomes)
    assert len(upstream.requests) == 200
    expected_cost = sum(cost_nanousd(i) for i in range(200))
    plain = [o for o in outcomes if o.kind == "plain"]
    assert len(plain) == 100
    assert sum(o.header_cost_nanousd or 0 for o in plain) == sum(cost_nanousd(o.index) for o in plain)

    ledger = server.ledger
    totals = ledger.totals()
    assert totals["traces"] == 200
    assert totals["spans"] == 200
    assert totals["spend_calls"] == 200
    assert totals["spend_errors"] == 0
    assert totals["spend_cost"] == totals["span_cost"] == totals["trace_cost"] == expected_cost
    # Every request the client saw is the trace with its id, carrying its own cost.
    for o in outcomes:
        trace = ledger.trace(o.request_id)
        assert trace is not None, o
        assert (trace["status"], trace["http_status"], trace["key_name"]) == ("ok", 200, "tester")
        assert bool(trace["stream"]) == (o.kind == "stream")
        assert trace["cost_nanousd"] == cost_nanousd(o.index)
    assert len({o.request_id for o in outcomes}) == 200
    # Both workers served: the test is about concurrency across processes too.
    assert server.log().count("Application startup complete") == 2
