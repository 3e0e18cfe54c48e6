"""The rate limit holds across gunicorn workers and hosts: real servers
(2 workers each) share one bucket per client through the database, so a
burst of B lets exactly B requests through however they are spread."""
from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.conftest import MARINA_KEY
from tests.e2e.load import run_load

pytestmark = pytest.mark.e2e

BURST = 20
LIMIT = {"MARINA_RATE_LIMIT_RPS": "0.001", "MARINA_RATE_LIMIT_BURST": str(BURST)}  # ~no refill during the test


def fire(urls: list[str], requests: int) -> list[int | None]:
    outcomes = asyncio.run(run_load(urls, MARINA_KEY, concurrency=16, requests=requests, kinds=("plain",)))
    assert {o.server for o in outcomes} == set(urls)
    refused = [o for o in outcomes if o.status == 429]
    assert all(o.error_code == "rate_limit_exceeded" for o in refused)
    return [o.status for o in outcomes]


def test_two_servers_on_one_postgres_share_each_clients_bucket(servers):
    ledger = servers.postgres()
    a, b = servers.start(ledger, **LIMIT), servers.start(ledger, **LIMIT)
    statuses = fire([a.base_url, b.base_url], 3 * BURST)
    assert statuses.count(200) == BURST and statuses.count(429) == 2 * BURST, statuses
    assert ledger.one("SELECT COUNT(*) FROM ledger_trace WHERE http_status = 429") == 2 * BURST
    assert ledger.rows("SELECT client FROM passthru_ratebucket") == [("key:tester",)]
    # The refusal says when to come back.
    refused = httpx.post(
        f"{a.base_url}/v1/chat/completions",
        headers={"authorization": f"Bearer {MARINA_KEY}"},
        json={"model": "openrouter/openai/gpt-5.2", "messages": [{"role": "user", "content": "again"}]},
        timeout=30,
    )
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1


def test_two_workers_on_one_sqlite_file_share_the_bucket(servers):
    server = servers.start(workers=2, **LIMIT)
    statuses = fire([server.base_url], 2 * BURST)
    assert statuses.count(200) == BURST and statuses.count(429) == BURST, statuses
