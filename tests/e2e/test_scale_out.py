"""Scale-out: two gunicorn servers (2 workers each) on different ports share
one PostgreSQL ledger. Under load their counts add up exactly, and one daily
cap holds across both."""
from __future__ import annotations

import asyncio
import os

import httpx
import pytest

from passthru.spendcap import estimate_nanousd
from tests.conftest import MARINA_KEY
from tests.e2e.load import CAP_PHASE, CENT_NANOUSD, cap_test_cost_nanousd, run_load, summary
from tests.e2e.servers import wait_until_no_holds
from tests.e2e.upstream_process import upstream_process

pytestmark = pytest.mark.e2e

SECONDS = float(os.environ.get("MARINA_E2E_LOAD_SECONDS", "12")) * 2 / 3
CAP_USD = "0.05"
CAP_CONCURRENCY = 8
UNPRICED = "openrouter/marina-load/unpriced"


def test_two_servers_on_one_postgres_count_exactly_and_share_one_daily_cap(servers):
    ledger = servers.postgres()
    with upstream_process(cost="cap") as upstream_url:
        env = {"MARINA_OPENROUTER_BASE_URL": upstream_url, "MARINA_DAILY_SPEND_CAP_USD": CAP_USD}
        a, b = servers.start(ledger, **env), servers.start(ledger, **env)
        urls = [a.base_url, b.base_url]

        # 1. Load across both, every call far below the cap: exact counts. The
        # model id is one genai-prices does not know, so each call in flight
        # holds nothing against the cap: held at gpt-5.2's price with the
        # default completion ($0.014), 128 calls at once would not fit under
        # $0.05 (docs/reliability.md).
        load = asyncio.run(run_load(urls, MARINA_KEY, concurrency=128, seconds=SECONDS, model=UNPRICED))
        assert all(o.ok for o in load), summary(load)
        assert {o.server for o in load} == set(urls)
        totals = ledger.totals()
        assert totals["traces"] == totals["spans"] == totals["spend_calls"] == len(load)
        spent_before = sum(cap_test_cost_nanousd(o.index) for o in load)
        assert totals["spend_cost"] == totals["span_cost"] == totals["trace_cost"] == spent_before
        assert spent_before < CENT_NANOUSD  # phase 2's bound below assumes it
        wait_until_no_holds(ledger)  # every call's hold was released, on both servers

        # 2. A cent per call from here on: the cap stops both servers together.
        capped = asyncio.run(
            run_load(urls, MARINA_KEY, concurrency=CAP_CONCURRENCY, requests=60, first_index=CAP_PHASE, kinds=("plain",))
        )
        passed = [o for o in capped if o.ok]
        refused = [o for o in capped if not o.ok]
        assert all(o.status == 429 and o.error_code == "spend_cap_reached" for o in refused), summary(refused)
        # Each call holds its estimated cost (passthru/spendcap.py: no
        # max_tokens, so MARINA_SPEND_CAP_COMPLETION_TOKENS at gpt-5.2's price,
        # more than the cent it costs) from its check until its spend is
        # recorded, in the shared database. So spend never passes the cap: at
        # most floor((cap - spent before) / cent) calls; and calls stop only
        # when the next estimate no longer fits: at least as many as leave
        # less than one estimate.
        cap_nanousd = int(float(CAP_USD) * 10**9)
        least = estimate_nanousd("openrouter", "openai/gpt-5.2", {}, 0)  # the completion alone
        most = estimate_nanousd("openrouter", "openai/gpt-5.2", {}, 2000)  # with a prompt larger than the load's
        assert least > CENT_NANOUSD
        upper = (cap_nanousd - spent_before) // CENT_NANOUSD
        lower = (cap_nanousd - spent_before - most) // CENT_NANOUSD + 1
        assert lower <= len(passed) <= upper, (lower, len(passed), upper)
        assert {o.server for o in refused} == set(urls)

        # 3. After the cap, both servers refuse every call, naming the variable and the reset.
        for url in urls:
            for _ in range(6):
                response = httpx.post(
                    f"{url}/v1/chat/completions",
                    headers={"authorization": f"Bearer {MARINA_KEY}"},
                    json={"model": "openrouter/openai/gpt-5.2", "messages": [{"role": "user", "content": "load #2000000"}]},
                    timeout=30,
                )
                assert response.status_code == 429
                error = response.json()["error"]
                assert error["code"] == "spend_cap_reached"
                assert "MARINA_DAILY_SPEND_CAP_USD" in error["message"] and "resets at" in error["message"]

    totals = ledger.totals()
    assert totals["spend_calls"] == len(load) + len(passed)
    assert totals["spend_cost"] == spent_before + CENT_NANOUSD * len(passed)
    refusals = ledger.one("SELECT COUNT(*) FROM ledger_trace WHERE http_status = 429 AND error_kind = 'spend_cap_reached'")
    assert refusals == len(refused) + 12
    assert totals["traces"] == len(load) + len(capped) + 12
