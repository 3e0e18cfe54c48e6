"""Items linked to their traces (ledger/benchmarks/links.py) on the real τ²
fixture: traces are written the way passthru writes them, each carrying the
identity marina.conversation.identify computes from a request body shaped as
τ² sends it (agent: policy, greeting, the user's first words...; user
simulator: its own system prompt and the same two texts with roles swapped).
The end-to-end test does the same with the real τ² CLI through Marina."""
from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction

from kernel.conversation import identify
from ledger.benchmarks.importers import convert_tau2, import_ledger, import_tau2
from ledger.benchmarks.tau2.results import parse_time
from ledger.models import BenchmarkItem, BenchmarkItemTrace, Trace
from ledger.spend.records import SpanRecord, TraceRecord
from ledger.spend.trace_writer import insert_traces
from tests.ledger.tau2files import results

AGENT, USER = "openrouter/oracle-agent", "openrouter/oracle-user"
SWAP = {"assistant": "user", "user": "assistant"}


def _simulations(name: str = "airline-oracle") -> list[dict[str, Any]]:
    return json.loads(results(name).read_text())["simulations"]


def _trace(
    request_id: str, model: str, body: dict[str, Any], at: Any, cost: int | None, label: str = "", key: str = "team-a"
) -> TraceRecord:
    who = identify(body)
    span = SpanRecord(
        seq=0, name="upstream", started_at=at, provider="openrouter", upstream_model=model.split("/", 1)[1],
        http_status=200, prompt_tokens=10, completion_tokens=3, cost_nanousd=cost,
        cost_source="provider" if cost is not None else "none",
    )  # fmt: skip
    return TraceRecord(
        request_id=request_id, started_at=at, path="/v1/chat/completions", requested_model=model,
        route="verify" if label else "passthru", formation_label=label, spans=[span],
        conv_seed=who.seed, conv_opening=who.opening, conv_system=who.system, key_name=key,
    )  # fmt: skip


def _record_simulation(
    sim: dict[str, Any], *, shift: timedelta = timedelta(0), cost: int | None = 1000, prefix: str = "", key: str = "team-a"
) -> list[str]:
    """The calls τ² makes for one simulation, as traces: the user simulator's
    first call (greeting only), then agent and user calls over the growing
    conversation. Returns their request ids."""
    messages = [{"role": m["role"], "content": m.get("content") or ""} for m in sim["messages"]]
    start = parse_time(sim["start_time"]) + shift
    task = f"{prefix}{sim['task_id']}#{sim['trial']}"
    user_system = {"role": "system", "content": f"You are a customer. Scenario of task {sim['task_id']}."}
    policy = {"role": "system", "content": "You are an airline agent. The policy..."}
    traces = []
    step = timedelta(milliseconds=50)
    # the user simulator's first call: the greeting only
    traces.append(_trace(f"{task}-u0", USER, {"seed": sim["seed"], "messages": [user_system, {"role": "user", "content": messages[0]["content"]}]}, start + step, cost, key=key))
    for n in range(2, min(len(messages), 6) + 1):
        seen = messages[:n]
        traces.append(_trace(f"{task}-a{n}", AGENT, {"seed": sim["seed"], "messages": [policy, *seen]}, start + n * 2 * step, cost, "approved" if n % 2 else "revised", key=key))
        flipped = [{"role": SWAP.get(m["role"], m["role"]), "content": m["content"]} for m in seen if m["role"] in SWAP]
        traces.append(_trace(f"{task}-u{n}", USER, {"seed": sim["seed"], "messages": [user_system, *flipped]}, start + (n * 2 + 1) * step, cost, key=key))
    with transaction.atomic():
        insert_traces(traces)
    return [t.request_id for t in traces]


def _linked(item: BenchmarkItem) -> dict[str, str]:
    return dict(BenchmarkItemTrace.objects.filter(item=item).values_list("trace__request_id", "role"))


@pytest.mark.django_db(transaction=True)
def test_every_item_is_linked_to_exactly_its_own_calls(tmp_path):
    sims = _simulations()
    expected = {f"{s['task_id']}#{s['trial']}": _record_simulation(s) for s in sims}
    # Noise: the same conversations an hour later (another run with the same seeds).
    _record_simulation(sims[0], shift=timedelta(hours=1), prefix="later-")

    result = import_tau2(results("airline-oracle"), target=AGENT, cost_from_spend=True)
    run = result.run
    assert result.links.as_dict() == {
        "linked": 40, "unfound": 0, "ambiguous": 0, "traces": sum(map(len, expected.values())), "unassigned_traces": 0,
        "within_keys": None, "keys": ["team-a"],
    }  # fmt: skip
    for item in BenchmarkItem.objects.filter(run=run):
        linked = _linked(item)
        assert sorted(linked) == sorted(expected[item.item_id]), item.item_id
        assert {rid for rid, role in linked.items() if role == "agent"} == {
            rid for rid in expected[item.item_id] if "-a" in rid
        }
        traces = Trace.objects.filter(request_id__in=linked)
        assert item.link_status == "linked"
        assert item.trace_calls == len(linked)
        assert item.trace_cost_nanousd == sum(t.cost_nanousd for t in traces)
        assert item.trace_prompt_tokens == sum(t.prompt_tokens for t in traces)
        agent_labels = [t.formation_label for t in traces if t.requested_model == AGENT]
        assert item.decisions == {"verify": {lab: agent_labels.count(lab) for lab in set(agent_labels)}}
    # --cost-from-spend used the linked traces: this run's calls only, not the later run's.
    assert run.cost_source == "traces"
    assert run.cost_nanousd == 1000 * sum(map(len, expected.values()))
    # a trace shows its item
    one = Trace.objects.get(request_id="11#0-a2")
    assert [i.item_id for i in one.benchmark_items.all()] == ["11#0"]


@pytest.mark.django_db(transaction=True)
def test_a_converted_ledger_file_links_the_same_way(tmp_path):
    sims = _simulations()
    for s in sims[:5]:
        _record_simulation(s)
    for fmt in ("marina", "original"):
        ledger, path = convert_tau2(results("airline-oracle"), tmp_path / f"{fmt}.json", fmt=fmt)
        result = import_ledger(path, target_kind="model", target=AGENT, dry_run=True)
        assert result.links.count("linked") == 5
        assert result.links.count("unfound") == 35
        assert "35 item(s) with no trace found" in result.links.note()
    text = (tmp_path / "marina.json").read_text()
    assert "Hi! [task:" not in text  # hashes only, never the conversation


@pytest.mark.django_db(transaction=True)
def test_unpriced_and_unfound_items_say_so(tmp_path):
    sims = _simulations()
    _record_simulation(sims[0])
    result = import_tau2(results("airline-oracle"), target=AGENT, cost_from_spend=True)
    # Not every item has traces: the run cost falls back to spend_daily's whole days, and says why.
    assert result.run.cost_source == "spend"
    assert "39 evaluated item(s) have none" in result.cost_note
    items = BenchmarkItem.objects.filter(run=result.run)
    assert items.filter(link_status="unfound").count() == 39
    assert items.filter(link_status="unfound", trace_calls=0, trace_cost_nanousd=None).count() == 39


@pytest.mark.django_db(transaction=True)
def test_identical_openings_in_overlapping_windows_are_left_unlinked():
    sims = _simulations()
    a, b = sims[0], next(s for s in sims if s["seed"] == sims[0]["seed"] and s["task_id"] != sims[0]["task_id"])
    # b's conversation made to open exactly like a's, in a's time window: the calls could be either's.
    clone = {**b, "messages": a["messages"], "start_time": a["start_time"], "end_time": a["end_time"]}
    _record_simulation(a)
    from ledger.benchmarks.links import plan_links
    from ledger.benchmarks.tau2.convert import to_ledger
    from ledger.benchmarks.tau2.results import read_results

    ledger = to_ledger(read_results(results("airline-oracle")))
    items = [i for i in ledger.items if i.id in (f"{a['task_id']}#{a['trial']}", f"{b['task_id']}#{b['trial']}")]
    twin = next(i for i in items if i.task_id == b["task_id"])
    first = next(i for i in items if i.task_id == a["task_id"])
    twin.opening_agent, twin.opening_user = first.opening_agent, first.opening_user
    twin.start_time, twin.end_time = clone["start_time"], clone["end_time"]
    plan = plan_links(items, models=[AGENT, USER], started=parse_time(a["start_time"]), ended=parse_time(a["end_time"]))
    assert plan.count("ambiguous") == 2 and plan.count("linked") == 0
    assert plan.unassigned == plan.candidates > 0


@pytest.mark.django_db(transaction=True)
def test_a_run_whose_calls_were_all_unpriced_costs_unknown_never_zero(tmp_path):
    calls = sum(len(_record_simulation(s, cost=None)) for s in _simulations())
    result = import_tau2(results("airline-oracle"), target=AGENT, cost_from_spend=True)
    run = result.run
    assert (run.cost_source, run.cost_nanousd, run.unpriced_calls) == ("traces", None, calls)
    assert run.cost_shown == f"unpriced ({calls} calls)"
    assert any(f"{calls} of the {calls} linked calls were unpriced; the cost is unknown" in w for w in result.warnings)


@pytest.mark.django_db(transaction=True)
def test_a_run_with_some_unpriced_calls_costs_at_least_the_priced_ones(tmp_path):
    sims = _simulations()
    priced = len(_record_simulation(sims[0], cost=1000))
    unpriced = sum(len(_record_simulation(s, cost=None)) for s in sims[1:])
    run = import_tau2(results("airline-oracle"), target=AGENT, cost_from_spend=True).run
    assert (run.cost_nanousd, run.unpriced_calls) == (1000 * priced, unpriced)
    assert run.cost_shown == f"≥ ${1000 * priced / 1e9:.8f} ({unpriced} unpriced)"


# --- Linking within the keys the run used ------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_an_import_links_only_within_its_keys_and_says_so(tmp_path):
    """Team b ran the same tasks with the same seeds at the same time: without
    --key its calls would compete for team a's items; with it they are not candidates."""
    from io import StringIO

    from django.core.management import call_command

    sims = _simulations()
    ours = {f"{s['task_id']}#{s['trial']}": _record_simulation(s) for s in sims}
    for s in sims:
        _record_simulation(s, shift=timedelta(milliseconds=10), prefix="b-", key="team-b")
        _record_simulation(s, shift=timedelta(milliseconds=20), prefix="ops-", key="ops/carol")

    mixed = import_tau2(results("airline-oracle"), target=AGENT, dry_run=True).links
    assert mixed is not None and mixed.within is None
    # without --key the items claim every team's identical calls, and the output says so
    assert mixed.keys == ["ops/carol", "team-a", "team-b"] and mixed.as_dict()["traces"] == 3 * sum(map(len, ours.values()))
    assert "links from 3 keys (ops/carol, team-a, team-b): pass --key" in mixed.note()
    # an operator key's import covers its callers' calls
    plan = import_tau2(results("airline-oracle"), target=AGENT, dry_run=True, keys=["ops"]).links
    assert plan is not None and (plan.count("linked"), plan.keys, plan.within) == (40, ["ops/carol"], ("ops",))

    out = StringIO()
    call_command("import_tau2", str(results("airline-oracle")), "--target", AGENT, "--key", "team-a", "--cost-from-spend", stdout=out)
    run = BenchmarkItem.objects.first().run
    for item in BenchmarkItem.objects.filter(run=run):
        assert sorted(_linked(item)) == sorted(ours[item.item_id]), item.item_id
    assert run.cost_nanousd == 1000 * sum(map(len, ours.values())), "only team a's calls are its cost"
    assert "within key(s) team-a: links from team-a" in out.getvalue()
