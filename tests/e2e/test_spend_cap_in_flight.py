"""Issue 10 item 4: the daily cap counts the calls in flight. Spend $0.32, cap
$0.40, then 50 concurrent calls that each cost $0.01: only the calls whose
estimated cost fits under the cap go upstream, so spend ends at or under the
cap (the calls cost less than their estimate here: the overshoot bound, what
the calls cost beyond their estimates, is zero), not at $0.82. Against real
gunicorn servers: one on SQLite, and two on one PostgreSQL (the holds live in
the database, so one cap holds across hosts)."""
from __future__ import annotations

import asyncio
import itertools
import math
from decimal import Decimal
from typing import Any

import httpx
import pytest

from kernel.money import dollars
from passthru.spendcap import estimate_nanousd
from tests.conftest import MARINA_KEY
from tests.e2e.servers import wait_until_no_holds
from tests.upstream import Received, Reply, Sse, completion

pytestmark = pytest.mark.e2e

CAP = Decimal("0.40")
CALL_COST = Decimal("0.01")  # what the provider reports for each call
MAX_TOKENS = 715  # 715 × $14 per million completion tokens (gpt-5.2) = $0.01001: each call's estimate is above its cost
MODEL = "openrouter/openai/gpt-5.2"
CONCURRENT = 50


def nano(amount: Decimal) -> int:
    return int(amount * 10**9)


BURST = 100  # calls from this index on are the concurrent ones


def handler(body: Any) -> Reply | Sse:
    usage = {"prompt_tokens": 20, "completion_tokens": MAX_TOKENS, "total_tokens": 20 + MAX_TOKENS, "cost": float(CALL_COST)}
    index = int(body["messages"][-1]["content"].split()[-1])
    delay = 0.5 if index >= BURST else 0.0  # slow enough that all 50 are in flight together
    if body.get("stream"):
        return Sse(usage=usage, delay=delay)
    return Reply(json={**completion("ok"), "usage": usage}, delay=delay)


def request(i: int, *, stream: bool) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": f"cap call {i}"}], "max_tokens": MAX_TOKENS, "stream": stream}


async def send(client: httpx.AsyncClient, url: str, i: int, *, stream: bool) -> httpx.Response:
    async with client.stream("POST", f"{url}/v1/chat/completions", json=request(i, stream=stream)) as response:
        await response.aread()
        return response


async def burst(urls: list[str], first: int, count: int) -> list[httpx.Response]:
    headers = {"authorization": f"Bearer {MARINA_KEY}"}
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
    async with httpx.AsyncClient(headers=headers, timeout=30, limits=limits) as client:
        servers = itertools.cycle(urls)
        return list(await asyncio.gather(*(send(client, next(servers), i, stream=i % 2 == 1) for i in range(first, first + count))))


def estimates(received: list[Received]) -> list[int]:
    """What Marina held for each call that reached the upstream, from the bytes it sent."""
    return [estimate_nanousd("openrouter", "openai/gpt-5.2", r.body, len(r.raw)) for r in received]


def capped_servers(servers: Any, database: str) -> tuple[Any, list[str]]:
    """One server on SQLite, or two on one PostgreSQL, with the cap at CAP."""
    env = {"MARINA_DAILY_SPEND_CAP_USD": str(CAP)}
    if database == "sqlite":
        ledger = servers.sqlite()
        return ledger, [servers.start(ledger, **env).base_url]
    ledger = servers.postgres()
    return ledger, [servers.start(ledger, **env).base_url, servers.start(ledger, **env).base_url]


def spend_32_cents(ledger: Any, urls: list[str]) -> int:
    """Step 1: $0.32 spent, a cent at a time (one call after the other: nothing in flight)."""
    for i in range(32):
        response = httpx.post(
            f"{urls[i % len(urls)]}/v1/chat/completions", json=request(i, stream=False),
            headers={"authorization": f"Bearer {MARINA_KEY}"}, timeout=30,
        )  # fmt: skip
        assert response.status_code == 200, response.text
    spent_before = int(ledger.one("SELECT SUM(cost_nanousd) FROM spend_daily"))
    assert spent_before == 32 * nano(CALL_COST)
    return spent_before


def fifty_at_once(ledger: Any, upstream: Any, urls: list[str], spent_before: int) -> tuple[list[httpx.Response], list[int], int]:
    """Step 2: fifty calls at once; none over the cap. Returns the answers, the holds of the calls
    that reached the upstream and the spend after."""
    responses = asyncio.run(burst(urls, BURST, CONCURRENT))
    passed = [r for r in responses if r.status_code == 200]
    refused = [r for r in responses if r.status_code != 200]
    assert all(r.status_code == 429 and r.json()["error"]["code"] == "spend_cap_reached" for r in refused), [
        r.text for r in refused if r.status_code != 429
    ]
    received = upstream.requests[32:]
    assert len(received) == len(passed)  # a refused call never reached the upstream
    held = estimates(received)
    assert all(h > nano(CALL_COST) for h in held)  # the estimate is on the high side of the cost here

    spent = int(ledger.one("SELECT SUM(cost_nanousd) FROM spend_daily"))
    assert spent == spent_before + len(passed) * nano(CALL_COST)
    # The bound: spend ≤ cap + what calls cost beyond their estimates (none here).
    overshoot_bound = sum(max(0, nano(CALL_COST) - h) for h in held)
    assert spent <= nano(CAP) + overshoot_bound, (dollars(spent), len(passed))
    return responses, held, spent


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_fifty_concurrent_calls_stop_at_the_cap(servers, upstream, database):
    upstream.handler = handler
    ledger, urls = capped_servers(servers, database)
    spent_before = spend_32_cents(ledger, urls)
    # Nothing in flight includes the cap's own books: a lease sized with a chunk (far from the cap,
    # early in step 1) publishes its room left on the ticker (every TICK_SECONDS), so for a moment
    # its row still counts spend that spend_daily has too, and others refuse a call that fits (seen
    # under the two-worker suite: 6 passed, not 7). Conservative, never over the cap (the test
    # below); here the burst starts once step 1's leases are given back (IDLE_SECONDS).
    wait_until_no_holds(ledger)

    responses, held, spent = fifty_at_once(ledger, upstream, urls, spent_before)
    passed = [r for r in responses if r.status_code == 200]
    # And no call was refused while its estimate fitted beside the others in flight.
    assert len(passed) >= math.floor((nano(CAP) - spent_before) / max(held)), len(passed)
    assert {urls[i % len(urls)] for i, r in enumerate(responses) if r.status_code == 429} == set(urls)

    # 3. Once the calls are over, a refusal states the current figures.
    wait_until_no_holds(ledger)
    response = httpx.post(
        f"{urls[0]}/v1/chat/completions", json=request(999, stream=False),
        headers={"authorization": f"Bearer {MARINA_KEY}"}, timeout=30,
    )
    assert response.status_code == 429
    message = response.json()["error"]["message"]
    assert f"{dollars(spent)} spent today (UTC) and $0.00000000 held by 0 calls in flight, of ${CAP}" in message, message
    assert "MARINA_DAILY_SPEND_CAP_USD" in message and "resets at" in message


def test_a_burst_while_the_leases_of_a_run_of_calls_are_live_stays_under_the_cap(servers, upstream):
    """The same burst at once after step 1, its leases (one with a chunk, sized far from the cap)
    still live on four processes of two servers: some room may be refused for a tick, none
    is given twice."""
    upstream.handler = handler
    ledger, urls = capped_servers(servers, "postgres")
    assert ledger.one("SELECT COUNT(*) FROM passthru_spendhold") == 0
    spent_before = spend_32_cents(ledger, urls)
    assert ledger.one("SELECT COUNT(*) FROM passthru_spendhold") > 0  # the leases are live
    fifty_at_once(ledger, upstream, urls, spent_before)
    wait_until_no_holds(ledger)
