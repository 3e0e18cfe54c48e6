"""The spool at its edge and the cap's lease in an outage (issue 42 A5, A8;
docs/reliability.md, "The guarantee: nothing answered goes unrecorded").

A throw-away PostgreSQL cluster is stopped (`pg_ctl -m immediate stop`) with
a daily cap set, so that the cap refuses calls while the database is gone:

- A5: the spool bounded at 300,000 bytes (the probe's setting), six streams of
  ~6 s admitted just before the database goes, and c=8 plain calls beside
  them, most refused. The refusals' traces once filled the room kept for the calls in
  flight: 4 of the 6 streams ended with [DONE] and were never recorded. Now
  every answered call reaches the ledger once the database is back.
- A8: a worker serves calls from its lease for LEASE_VALID_SECONDS after its
  last write that succeeded, then refuses (503 spend_cap_unavailable). The
  ticker used to mark the lease renewed when its write had failed: a worker
  served the whole of a 20 s outage from its lease."""
from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from passthru.spendcap import LEASE_VALID_SECONDS, TICK_SECONDS
from tests.conftest import MARINA_KEY
from tests.e2e.load import (
    Outcome,
    client_for,
    cost_nanousd,
    one_request,
    priced_handler,
    request_index,
    run_load,
    summary,
)
from tests.e2e.pgcluster import Cluster
from tests.e2e.servers import Gunicorn, Ledger
from tests.upstream import Sse, Step

pytestmark = pytest.mark.e2e

LONG = 1_000_000  # load indices from here on are the long streams


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    pg = Cluster()
    try:
        yield pg
    finally:
        pg.remove()


def _long_streams_handler() -> Any:
    priced = priced_handler()

    def handle(body: Any) -> Step | None:
        step = priced(body)
        i = request_index(body)
        if isinstance(step, Sse) and i is not None and i >= LONG:
            step.gap = 1.0  # ~6 chunks a second apart: a 6-second stream
        return step

    return handle


def _wait_for(ledger: Ledger, ids: set[str], seconds: float = 60) -> set[str]:
    deadline = time.monotonic() + seconds
    missing = set(ids)
    while time.monotonic() < deadline and missing:
        try:
            found = {row[0] for row in ledger.rows("SELECT request_id FROM ledger_trace")}
        except Exception:  # the database starting
            found = set()
        missing = ids - found
        time.sleep(0.3)
    return missing


def test_refusals_at_the_spools_edge_never_take_an_answered_calls_room(cluster, servers, upstream):
    upstream.handler = _long_streams_handler()
    ledger = cluster.database()
    server = servers.start(ledger, workers=2, MARINA_SPOOL_MAX_BYTES="300000", MARINA_DAILY_SPEND_CAP_USD="100")
    warm = asyncio.run(run_load([server.base_url], MARINA_KEY, concurrency=4, requests=16, kinds=("plain", "stream")))
    assert all(o.ok for o in warm), summary(warm)

    async def outage() -> tuple[list[Outcome], list[Outcome]]:
        # The streams are admitted with the database up; it goes while they run, and the
        # plain calls come beside them (answered into the spool, then refused).
        streams = asyncio.ensure_future(
            run_load([server.base_url], MARINA_KEY, concurrency=6, requests=6, first_index=LONG, kinds=("stream",))
        )
        await asyncio.sleep(1.0)
        await asyncio.to_thread(cluster.kill)
        plain = await run_load([server.base_url], MARINA_KEY, concurrency=8, seconds=8, first_index=1000, kinds=("plain",))
        return await streams, plain

    streams, plain = asyncio.run(outage())
    cluster.start()

    assert all(o.ok for o in streams), summary(streams)  # admitted before the lease ran out, answered in full
    refused = [o for o in plain if o.status == 503]
    assert len(refused) > 100, summary(plain)  # the refusals that once filled the spool's headroom
    assert {o.error_code for o in refused} == {"spend_cap_unavailable"}
    answered = [o for o in warm + streams + plain if o.status == 200]
    assert all(o.ok for o in answered), summary(answered)
    assert not _wait_for(ledger, {o.request_id for o in answered})
    time.sleep(1.5)  # a replay that would write something twice has had time to
    told = sum(cost_nanousd(o.index) for o in answered)
    totals = ledger.totals()
    assert totals["spend_calls"] == len(answered) and totals["spend_cost"] == told, (totals, len(answered))
    log = server.log()
    assert "could not record trace" not in log
    assert "refusals are counted, not journaled" in log


async def _paced(server: Gunicorn, seconds: float, every: float) -> list[Outcome]:
    client = client_for(server.base_url, MARINA_KEY, concurrency=2)
    outcomes: list[Outcome] = []
    stop = time.monotonic() + seconds
    i = 5000
    try:
        while time.monotonic() < stop:
            outcomes.append(await one_request(client, server.base_url, i, "plain"))
            i += 1
            await asyncio.sleep(every)
    finally:
        await client.close()
    return outcomes


def test_an_outage_refuses_calls_once_the_lease_window_is_over(cluster, servers, upstream):
    upstream.handler = priced_handler()
    ledger = cluster.database()
    server = servers.start(ledger, workers=1, MARINA_DAILY_SPEND_CAP_USD="100")
    warm = asyncio.run(_paced(server, 1.5, 0.05))
    assert all(o.ok for o in warm), summary(warm)

    cluster.kill()
    down = time.monotonic()
    during = asyncio.run(_paced(server, 12, 0.05))
    cluster.start()

    served = [o.started - down for o in during if o.status == 200]
    refused = [o for o in during if o.status == 503]
    # The last write that succeeded was before the kill: none is served past the window after it.
    assert served and max(served) < LEASE_VALID_SECONDS + TICK_SECONDS, (max(served), summary(during))
    assert refused and all(o.started - down > LEASE_VALID_SECONDS - 2 * TICK_SECONDS for o in refused)
    assert {o.error_code for o in refused} == {"spend_cap_unavailable"}
    assert all(o.retry_after for o in refused)
    # Every call after the window is refused (none let through uncounted).
    assert all(o.status == 503 for o in during if o.started - down > LEASE_VALID_SECONDS + TICK_SECONDS)
    answered = [o for o in warm + during if o.status == 200]
    assert not _wait_for(ledger, {o.request_id for o in answered})
