"""A board submission's banking result carries its retrieval config, and each domain's cost says what it
holds: the agent's calls only, the user simulator's and τ²'s own calls (embeddings, reranker, judge)
named and left out. τ²'s own calls are told apart (ledger/benchmarks/callers.py) and shown apart on
the run page. Imported τ² fixture runs and traces through the real ledger writer; no τ² needed."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ledger.benchmarks import callers
from ledger.benchmarks import submission as sub
from ledger.benchmarks.importers import import_tau2
from ledger.models import BenchmarkItemTrace, BenchmarkRun
from tests.ledger.builders import make_run
from tests.ledger.conftest import readers_account
from tests.ledger.report_builders import record_trace
from tests.ledger.tau2files import banking_copy

pytestmark = pytest.mark.django_db
START = datetime(2026, 12, 6, 1, 0, tzinfo=UTC)
SCHEMA = {
    "properties": {n: {} for n in ("model_name", "submission_type", "contact_info", "results", "methodology")},
    "$defs": {"Methodology": {"properties": {"notes": {}}},
              "DomainResults": {"properties": {"pass_1": {}, "cost": {}, "retrieval_config": {}}}},
}  # fmt: skip


def banking(tmp_path, config: str | None) -> BenchmarkRun:
    path = banking_copy(tmp_path / f"{config}.json", config)
    return import_tau2(path, target="openrouter/oracle-agent", target_kind="model").run


def test_a_banking_run_without_a_retrieval_config_fails_the_check(tmp_path):
    kept, bare = banking(tmp_path, "bm25"), banking(tmp_path, None)
    line = {x.requirement: x for x in sub.check([kept], keys_left={kept.pk: []})}["retrieval config"]
    assert (line.status, line.reason) == ("PASS", "banking_knowledge: bm25")
    line = {x.requirement: x for x in sub.check([bare], keys_left={bare.pk: []})}["retrieval config"]
    assert line.status == "FAIL" and f"run #{bare.pk} (banking_knowledge) recorded none" in line.reason


def test_fill_writes_the_runs_retrieval_config_into_banking_results(tmp_path):
    run = banking(tmp_path, "openai_embeddings")
    prepared: dict[str, Any] = {"results": {"banking_knowledge": {"pass_1": 50.0}}}
    done = sub.fill(prepared, SCHEMA, [run], submission_type="standard", notes="n", tau2_version="sierra-tau2 1.0.0")
    assert prepared["results"]["banking_knowledge"]["retrieval_config"] == "openai_embeddings"
    assert "results.banking_knowledge.retrieval_config = openai_embeddings (the run's)" in done.written
    assert "Retrieval config in banking_knowledge: openai_embeddings." in sub.methodology_notes([run])


def linked_run() -> BenchmarkRun:
    """Two items, each with one agent and one user call linked; τ² made two embedding calls under the
    same key (the index before the first simulation, a query during) and a judge call as the last ended.
    Not the run's: another key's call; a call an hour later; the previous run's judge, after its last
    conversation call; the next run's index, after this run's end."""
    run = make_run({"1#0": 1.0, "2#0": 0.0}, benchmark="tau2-banking_knowledge", domain="banking_knowledge",
                   agent_model="openrouter/oracle-agent", user_model="openrouter/oracle-user",
                   started_at=START, ended_at=START + timedelta(minutes=2))  # fmt: skip
    for n, item in enumerate(run.items.order_by("item_id")):
        at = START + timedelta(seconds=30 * n)
        agent = record_trace(request_id=f"a{n}", model=run.agent_model, key="team", started_at=at,
                             calls=[(run.agent_model, 2_000_000)], conv_seed=300 + n)  # fmt: skip
        user = record_trace(request_id=f"u{n}", model=run.user_model, key="team", started_at=at,
                            calls=[(run.user_model, 1_000_000)], conv_seed=300 + n)  # fmt: skip
        BenchmarkItemTrace.objects.create(item=item, trace=agent, role=BenchmarkItemTrace.Role.AGENT)
        BenchmarkItemTrace.objects.create(item=item, trace=user, role=BenchmarkItemTrace.Role.USER)
    # The previous run under the same key: its last conversation call, then its judge.
    record_trace(request_id="prev", model="openrouter/other-agent", key="team", started_at=START - timedelta(minutes=6),
                 calls=[("openrouter/other-agent", 9_000_000)], conv_seed=7)  # fmt: skip
    embed = "/v1/embeddings"
    for n, (model, at, key, path) in enumerate([
        ("gpt-4.1-2025-04-14", START - timedelta(minutes=5, seconds=50), "team", ""),  # the previous run's judge
        ("text-embedding-3-large", START - timedelta(minutes=3), "team", embed),  # this run's index
        ("text-embedding-3-large", START + timedelta(seconds=10), "team", embed),  # a query
        ("gpt-4.1-2025-04-14", START + timedelta(minutes=2, seconds=5), "team", ""),  # the judge, as the last one ends
        ("text-embedding-3-large", START + timedelta(minutes=2, seconds=20), "team", embed),  # the next run's index
        ("text-embedding-3-large", START + timedelta(seconds=10), "other-team", embed),
        ("text-embedding-3-large", START + timedelta(hours=1), "team", embed),
    ]):  # fmt: skip
        record_trace(request_id=f"h{n}", model=model, key=key, started_at=at, calls=[(model, 400_000)],
                     path=path or "/v1/chat/completions")  # fmt: skip
    return run


def test_taus_own_calls_are_told_apart_and_left_out_of_the_boards_cost():
    run = linked_run()
    found = {c.who: c for c in callers.by_caller(run)}
    assert (found["agent"].calls, found["agent"].cost_nanousd) == (2, 4_000_000)
    assert (found["user simulator"].calls, found["user simulator"].cost_nanousd) == (2, 2_000_000)
    own = found["τ² itself"]
    assert (own.calls, own.cost_nanousd, own.models) == (3, 1_200_000, ("gpt-4.1-2025-04-14", "text-embedding-3-large"))
    assert sub.cost_includes(run) == (
        "the agent's calls only; not included: user simulator $0.00100000 per trajectory (2 call(s)); "
        "τ² itself $0.00060000 per trajectory (3 call(s): gpt-4.1-2025-04-14, text-embedding-3-large)"
    )
    cost = {x.requirement: x for x in sub.check([run], keys_left={run.pk: []})}["cost"]
    assert cost.reason.startswith("banking_knowledge: $0.002000000 per trajectory (2 linked agent call(s)")
    assert "not included: user simulator" in cost.reason


def test_the_run_page_shows_taus_own_calls_apart(client):
    run = linked_run()
    client.force_login(readers_account("reader"))
    page = client.get(f"/reports/runs/{run.pk}/").content.decode()
    assert '<dd data-caller="agent"><span title="$0.00400000">$0.0040</span> · 2 calls</dd>' in page
    assert '<dd data-caller="user simulator"><span title="$0.00200000">$0.0020</span> · 2 calls</dd>' in page
    assert '<dd data-caller="τ² itself"><span title="$0.00120000">$0.0012</span> · 3 calls (gpt-4.1-2025-04-14, text-embedding-3-large)</dd>' in page


def test_a_call_linked_to_two_items_counts_once_for_its_role():
    run = linked_run()
    first, second = run.items.order_by("item_id")[:2]
    agent_call = BenchmarkItemTrace.objects.get(item=first, role=BenchmarkItemTrace.Role.AGENT).trace
    BenchmarkItemTrace.objects.create(item=second, trace=agent_call, role=BenchmarkItemTrace.Role.AGENT)
    found = {c.who: c for c in callers.by_caller(run)}
    assert (found["agent"].calls, found["agent"].cost_nanousd) == (2, 4_000_000)
    assert found["τ² itself"].calls == 3
