"""manage.py demo: the shipped runs and a day of synthetic traffic, marked,
replaceable and removable without touching anything else."""
from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.db.models import Sum

from ledger import demo
from ledger.benchmarks.compare import compare_groups
from ledger.models import BenchmarkItem, BenchmarkRun, Experiment, Span, SpendDaily, Trace
from tests.ledger.conftest import import_fixture
from tests.ledger.report_builders import record_trace
from tests.ledger.tau2files import intended_pass_hat_k

NOW = datetime(2026, 12, 2, 9, 30, tzinfo=UTC)


def test_the_shipped_runs_carry_no_conversation_and_no_credential() -> None:
    files = sorted(demo.DATA.glob("*.ledger.json"))
    assert {f.name.removesuffix(".ledger.json") for f in files} == set(demo.RUNS)
    for path in files:
        text = path.read_text()
        assert "api_key" not in text and "sk-" not in text and "127.0.0.1" not in text, path
        data = json.loads(text)
        assert data["source"]["kind"] == "marina-demo"
        assert all("messages" not in item for item in data["items"])


def test_the_plain_demo_runs_keep_the_fixtures_figures(db, subtests: pytest.Subtests) -> None:
    demo.load_demo(now=NOW)  # once (a second of CPU), each run checked as a subtest of its own
    for stem, fixture in [("airline-1", "airline-oracle"), ("airline-3", "airline-infra-errors"), ("retail-1", "retail-oracle")]:
        with subtests.test(stem=stem, fixture=fixture):
            run = BenchmarkRun.objects.get(source_name=f"demo/{stem}.ledger.json")
            assert run.pass_hat_k == pytest.approx(intended_pass_hat_k(fixture), abs=1e-6)


def test_demo_loads_two_groups_and_a_day_of_traffic_that_agree_with_spend(db) -> None:
    made = demo.load_demo(now=NOW, seed=3)
    assert made.runs == 9 and made.items == 360 == BenchmarkItem.objects.count()
    groups = dict(BenchmarkRun.objects.values_list("group").annotate(n=Sum("simulations")).values_list("group", "n"))
    assert groups == {"demo:airline-plain": 120, "demo:airline-verify": 120, "demo:retail-plain": 40,
                      "demo:airline-mini": 40, "demo:airline-local": 40}  # fmt: skip
    assert made.traces == Trace.objects.count() and 900 < made.traces - made.linked_traces - 47 < 1500
    assert made.spans == Span.objects.count()
    # the day of traffic ends at NOW; the runs' items are linked to calls at the runs' own times
    traffic = Trace.objects.filter(benchmark_items=None).exclude(request_id__startswith="demo-live-")
    first, last = traffic.order_by("started_at").values_list("started_at", flat=True)[::traffic.count() - 1]
    assert NOW - timedelta(days=1) <= first and last < NOW
    assert set(Trace.objects.values_list("route", flat=True)) == {"passthru", "verify", "obligations+argcheck"}
    linked = BenchmarkItem.objects.filter(infra_error=False)
    assert made.linked_traces > 0 and not linked.exclude(link_status="linked").exists()
    assert set(BenchmarkRun.objects.values_list("cost_source", flat=True)) == {"spend", "none"}
    assert BenchmarkRun.objects.get(group="demo:airline-local").cost_nanousd is None  # unpriced: unknown, never 0
    labels = set(Trace.objects.filter(route="verify").values_list("formation_label", flat=True))
    assert {"approved", "revised", "held-write"} <= labels
    assert Trace.objects.filter(status="error").exists()
    # Written through the ledger's writer: spend_daily is exactly the upstream spans.
    spans = Span.objects.exclude(provider="")
    assert SpendDaily.objects.aggregate(c=Sum("calls"), n=Sum("cost_nanousd")) == {
        "c": spans.count(), "n": spans.aggregate(n=Sum("cost_nanousd"))["n"],
    }  # fmt: skip
    assert set(SpendDaily.objects.values_list("provider", flat=True)) == {"demo"}
    comparison = compare_groups("demo:airline-plain", "demo:airline-verify")
    assert comparison.b.pass_hat_k[0] > comparison.a.pass_hat_k[0]


def test_the_same_seed_makes_the_same_traffic(db) -> None:
    a = demo.synthetic_traffic(days=1, seed=7, now=NOW)
    b = demo.synthetic_traffic(days=1, seed=7, now=NOW)
    assert [(t.request_id, t.requested_model, len(t.spans)) for t in a] == [(t.request_id, t.requested_model, len(t.spans)) for t in b]
    assert len(demo.synthetic_traffic(days=3, seed=7, now=NOW)) > 2.5 * len(a)


def test_loading_again_replaces_and_remove_leaves_real_rows_alone(db) -> None:
    real_run = import_fixture("airline-oracle", target="openrouter/oracle-agent", group="real")
    record_trace(request_id="real-1", model="openrouter/openai/gpt-5.2", key="alice", started_at=NOW - timedelta(hours=1))
    first = demo.load_demo(now=NOW)
    second = demo.load_demo(now=NOW)
    assert (second.runs, second.traces) == (first.runs, first.traces)
    assert BenchmarkRun.objects.count() == 10 and Trace.objects.count() == first.traces + 1
    assert Experiment.objects.count() == 1
    gone = demo.remove_demo()
    assert (gone.runs, gone.traces, gone.spans) == (9, first.traces, first.spans)
    assert list(BenchmarkRun.objects.all()) == [real_run] and not Experiment.objects.exists()
    assert list(Trace.objects.values_list("request_id", flat=True)) == ["real-1"]
    assert list(SpendDaily.objects.values_list("key_name", flat=True)) == ["alice"]
    assert not demo.demo_present()


def test_the_command_loads_removes_and_refuses_a_bad_day_count(db) -> None:
    out = io.StringIO()
    call_command("demo", stdout=out)
    assert "Loaded demo data: 9 runs (360 items)" in out.getvalue() and "demo --remove" in out.getvalue()
    assert demo.demo_present()
    out = io.StringIO()
    call_command("demo", "--remove", stdout=out)
    assert out.getvalue().startswith("Removed the demo data: 9 runs") and not demo.demo_present()
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="--days must be between 1 and 30"):
        call_command("demo", "--days", "0")
