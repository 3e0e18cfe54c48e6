"""MARINA_TRACE_STORE=otel through a real two-worker gunicorn: the spans go
only to the OTLP receiver on loopback (tests/otlp_receiver.py), while the
database keeps spend_daily exact to the nano-dollar against the cost headers
the client saw, one slim trace row per call (request ids, conversation
identity, cost; no body) and no span at all for plain calls; and a τ² results
file imported afterwards still links its items to the calls that served them.

The calls are τ²'s shape (the fixture's seeds and openings, agent and user
simulator), sent with the real openai SDK; the results file is the airline
fixture with the replayed simulations' times moved to when they ran."""
from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conftest import MARINA_KEY
from tests.e2e.servers import manage
from tests.ledger.tau2files import results
from tests.upstream import Reply, Sse, completion

pytestmark = pytest.mark.e2e

AGENT, USER = "openrouter/oracle-agent", "openrouter/oracle-user"
SWAP = {"assistant": "user", "user": "assistant"}
POLICY = {"role": "system", "content": "You are an airline agent. The policy..."}


def cost_of(n: int) -> int:
    """Call n's cost in nano-dollars: varied, a multiple of 10 (x-marina-cost-usd has 8 decimals)."""
    return 10 * (37 + (n * 7919) % 5000)


def tau2_time(moment: datetime) -> str:
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat()  # τ² writes naive times, UTC under TZ=UTC


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_otel_store_keeps_spend_and_links_and_sends_every_span_to_the_collector(
    servers, upstream, otlp_receiver, tmp_path: Path, backend: str
):
    calls = {"n": 0}

    def handler(body: dict[str, Any]) -> Reply | Sse:
        calls["n"] += 1
        dollars = float(Decimal(cost_of(calls["n"])) / 10**9)
        if body.get("stream"):
            return Sse(usage={"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24, "cost": dollars})
        return Reply(json=completion("ok", prompt_tokens=20, completion_tokens=4, cost=dollars))

    upstream.handler = handler
    ledger = servers.postgres() if backend == "postgres" else servers.sqlite()
    server = servers.start(
        ledger, MARINA_TRACE_STORE="otel", MARINA_TRACE_BODIES="on",
        OTEL_EXPORTER_OTLP_ENDPOINT=otlp_receiver.base_url, OTEL_BSP_SCHEDULE_DELAY="100",
    )  # fmt: skip
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=MARINA_KEY, max_retries=0)

    header_cost = 0
    request_ids: list[str] = []

    def call(model: str, seed: int, messages: list[dict[str, Any]]) -> str:
        nonlocal header_cost
        raw = client.chat.completions.with_raw_response.create(model=model, seed=seed, messages=messages)
        assert raw.http_response.status_code == 200
        header_cost += int(Decimal(raw.headers["x-marina-cost-usd"]) * 10**9)
        request_ids.append(raw.headers["x-request-id"])
        return raw.headers["x-request-id"]

    # τ²'s calls for two simulations, as the agent and the user simulator send them.
    data = json.loads(results("airline-oracle").read_text())
    replayed: dict[str, list[str]] = {}
    for sim in data["simulations"][:2]:
        messages = [{"role": m["role"], "content": m.get("content") or ""} for m in sim["messages"]]
        user_system = {"role": "system", "content": f"You are a customer. Scenario of task {sim['task_id']}."}
        sim["start_time"] = tau2_time(datetime.now(UTC) - timedelta(milliseconds=200))
        ids = [call(USER, sim["seed"], [user_system, {"role": "user", "content": messages[0]["content"]}])]
        for n in range(2, min(len(messages), 5) + 1):
            seen = messages[:n]
            ids.append(call(AGENT, sim["seed"], [POLICY, *seen]))
            flipped = [{"role": SWAP[m["role"]], "content": m["content"]} for m in seen if m["role"] in SWAP]
            ids.append(call(USER, sim["seed"], [user_system, *flipped]))
        sim["end_time"] = tau2_time(datetime.now(UTC) + timedelta(milliseconds=200))
        replayed[f"{sim['task_id']}#{sim['trial']}"] = ids
    # And a streamed call (its cost is in no header: the upstream's usage says it).
    with client.chat.completions.with_streaming_response.create(
        model="openrouter/openai/gpt-5.2", messages=[{"role": "user", "content": "stream"}], stream=True
    ) as streamed:
        assert "[DONE]" in "".join(streamed.iter_lines())
        request_ids.append(streamed.headers["x-request-id"])
    streamed_cost = cost_of(calls["n"])
    assert calls["n"] == len(request_ids) > 10

    # The database: spend_daily exact, a trace row per call, no span.
    totals = ledger.totals()
    assert totals["spend_calls"] == len(request_ids) and totals["spend_errors"] == 0
    assert totals["spend_cost"] == header_cost + streamed_cost == sum(cost_of(n) for n in range(1, calls["n"] + 1))
    assert totals["traces"] == len(request_ids) and totals["trace_cost"] == totals["spend_cost"]
    assert totals["spans"] == 0, "with MARINA_TRACE_STORE=otel the spans are the collector's"
    assert {r[0] for r in ledger.rows("SELECT request_id FROM ledger_trace")} == set(request_ids)
    assert ledger.one("SELECT COUNT(*) FROM ledger_trace WHERE body IS NOT NULL") == 0, "bodies go to the collector only"
    assert ledger.one("SELECT COUNT(*) FROM ledger_trace WHERE conv_seed IS NOT NULL") == len(request_ids) - 1

    # The collector: every call's root span and its upstream call, once each, bodies included.
    otlp_receiver.wait_for(
        lambda: {s.attributes.get("marina.request_id") for s in otlp_receiver.spans} >= set(request_ids),
        "every call's root span", timeout=60,
    )  # fmt: skip
    otlp_receiver.wait_for(lambda: len(otlp_receiver.spans) >= 2 * len(request_ids), "every upstream call's span", timeout=60)
    assert len(otlp_receiver.spans) == 2 * len(request_ids), "each span once"
    roots = {s.attributes["marina.request_id"]: s for s in otlp_receiver.spans if not s.parent_span_id}
    assert set(roots) == set(request_ids)
    children = [s for s in otlp_receiver.spans if s.parent_span_id]
    assert sorted(s.parent_span_id for s in children) == sorted(s.span_id for s in roots.values())
    exported_cost = sum(round(Decimal(str(s.attributes["marina.cost_usd"])) * 10**9) for s in children)
    assert exported_cost == totals["spend_cost"]

    # The links: the results file imported afterwards finds each replayed item's calls.
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    imported = manage("import_tau2", str(path), "--target", AGENT, database_url=ledger.url)
    assert "2 item(s) linked to" in imported.stdout, imported.stdout
    linked = ledger.rows(
        "SELECT i.item_id, t.request_id FROM ledger_benchmarkitemtrace l JOIN ledger_trace t ON t.id = l.trace_id "
        "JOIN ledger_benchmarkitem i ON i.id = l.item_id"
    )
    by_item: dict[str, set[str]] = {}
    for item_id, request_id in linked:
        by_item.setdefault(item_id, set()).add(request_id)
    assert by_item == {item: set(ids) for item, ids in replayed.items()}
    item_cost = dict(ledger.rows("SELECT item_id, trace_cost_nanousd FROM ledger_benchmarkitem WHERE link_status = 'linked'"))
    for item, ids in replayed.items():
        assert item_cost[item] == sum(cost_of(request_ids.index(r) + 1) for r in ids)
