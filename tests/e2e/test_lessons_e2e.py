"""Lessons and benchmarks on a real 2-worker gunicorn server: a request
carrying τ²'s airline policy (τ²'s CLI sends no x-marina-eval header) is a
measurement of tau2-airline, so no lesson learned from tau2-airline reaches
it, whichever worker serves it and whichever formation asked; nor does one
learned from retail. Marked as training, it sees its own domain's only."""
from __future__ import annotations

import sqlite3
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import httpx
import pytest

from tests.conftest import MARINA_KEY
from tests.upstream import Reply, completion

pytestmark = pytest.mark.e2e

POLICY = (
    "<instructions>\nYou are a customer service agent that helps the user according to the <policy> provided "
    "below.\n</instructions>\n<policy>\n# Airline Agent Policy\n\nThe current time is 2024-05-15 15:00:00 EST.\n\n"
    "As an airline agent, you can help users **book**, **modify**, or **cancel** flight reservations.\n</policy>"
)
OPENING = "I want to add checked bags to my reservation and upgrade the cabin."
AIRLINE = "Before adding checked bags, read the cabin and the membership to count the free bags."
RETAIL = "Before upgrading a cabin or adding checked bags to an order, quote the new total first."


def store_lessons(path: str) -> dict[str, int]:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
    conn = sqlite3.connect(path, timeout=30)
    try:
        ids = {}
        for name, rule, benchmark in (("airline", AIRLINE, "tau2-airline"), ("retail", RETAIL, "tau2-retail")):
            cur = conn.execute(
                "INSERT INTO ledger_lesson (rule, domain, trust, benchmark, item_ids, source_name, judge_model, support,"
                " retired, created_at, updated_at) VALUES (?, 'tools', 'trusted', ?, '[]', '', '', 1, 0, ?, ?)",
                (rule, benchmark, now, now),
            )
            ids[name] = int(cur.lastrowid or 0)
        conn.commit()
        return ids
    finally:
        conn.close()


def ask(url: str, model: str, **headers: str) -> httpx.Response:
    response = httpx.post(
        f"{url}/v1/chat/completions",
        headers={"authorization": f"Bearer {MARINA_KEY}", **headers},
        json={"model": model, "messages": [{"role": "system", "content": POLICY}, {"role": "user", "content": OPENING}], "seed": 626729},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return response


def test_a_tau2_request_never_sees_lessons_of_its_benchmark_on_any_worker(servers, upstream):
    server = servers.start(workers=2)
    assert server.ledger is not None and server.ledger.sqlite_path is not None
    ids = store_lessons(str(server.ledger.sqlite_path))
    upstream.handler = lambda body: Reply(json=completion('{"verdict": "approve"}' if "verdict" in str(body) else "Sure."))

    models = ["marina/lessons:openrouter/agent", "marina/verify:openrouter/agent", "marina/lessons:marina/obligations:openrouter/agent"]
    with ThreadPoolExecutor(6) as pool:  # enough at once that both workers serve some
        measured = list(pool.map(lambda m: ask(server.base_url, m), models * 4))
    assert {r.headers["x-marina-lessons"] for r in measured} == {"0"}
    assert len(server.worker_pids()) == 2
    sent = [m for r in upstream.requests for m in r.body.get("messages", [])]
    assert not any(AIRLINE in str(m.get("content")) or RETAIL in str(m.get("content")) for m in sent)

    # Explicitly training on airline: airline's lesson, never retail's.
    trained = ask(server.base_url, "marina/lessons:openrouter/agent", **{"x-marina-eval": "mode=train"})
    assert trained.headers["x-marina-lessons"] == str(ids["airline"])
    assert AIRLINE in str(upstream.requests[-1].body["messages"]) and RETAIL not in str(upstream.requests[-1].body["messages"])
