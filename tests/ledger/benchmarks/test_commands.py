"""The ledger's management commands: one call_command smoke test each, the
exit statuses (2 bad input, 3 --require-clean), and `spend` figures."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from ledger.models import BenchmarkRun, SpendDaily
from tests.ledger.tau2files import REAL_LOOKING_KEY, copy_with, expected
from tests.ledger.tau2files import results as fixture

ROOT = Path(__file__).resolve().parents[3]


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def refused(*args: str) -> tuple[CommandError, str]:
    out = io.StringIO()
    with pytest.raises(CommandError) as caught:
        call_command(*args, stdout=out, stderr=io.StringIO())
    return caught.value, out.getvalue()


# --- tau2_summary -----------------------------------------------------------------
def test_summary_prints_taus_figures():
    out, err = run("tau2_summary", str(fixture("airline-oracle")))
    lines = out.splitlines()
    assert lines[:6] == [
        "airline · agent openrouter/oracle-agent · user openrouter/oracle-user · 40 simulations",
        "mean reward 0.700000",
        "pass^1 0.700000",
        "pass^2 0.516667",
        "pass^3 0.400000",
        "pass^4 0.300000",
    ]
    assert "board comparable: no" in lines and "infrastructure" not in out and err == ""


def test_summary_reports_excluded_infrastructure_errors():
    out, _ = run("tau2_summary", str(fixture("airline-infra-errors")))
    assert "mean reward 0.736842" in out and "pass^3 0.400000" in out and "pass^4" not in out
    assert "excluded 2 infrastructure error(s)" in out.splitlines()


def test_summary_json():
    out, _ = run("tau2_summary", str(fixture("retail-oracle")), "--json")
    data = json.loads(out)
    exp = expected("retail-oracle")
    assert (data["domain"], data["simulations"], data["infra_errors"]) == ("retail", 40, 0)
    assert round(data["mean_reward"], 6) == exp["avg_reward"]
    assert [round(p, 6) for p in data["pass_hat_k"]] == [exp[f"pass^{k}"] for k in range(1, 5)]
    assert data["comparable"] is False and len(data["comparability_reasons"]) == 3


def test_require_clean_says_invalid_without_scores_and_exits_3(tmp_path):
    error, out = refused("tau2_summary", str(fixture("airline-infra-errors")), "--require-clean")
    assert (error.returncode, out.strip()) == (3, "INVALID: 2 infrastructure error(s)")
    ledger = tmp_path / "x.ledger.json"
    error, out = refused("tau2_convert", str(fixture("airline-infra-errors")), "--out", str(ledger), "--require-clean")
    assert (error.returncode, out.strip(), ledger.exists()) == (3, "INVALID: 2 infrastructure error(s)", False)
    error, out = refused("tau2_summary", str(fixture("airline-infra-errors")), "--require-clean", "--json")
    assert json.loads(out) == {"file": str(fixture("airline-infra-errors")), "invalid": True, "infra_errors": 2}
    out, _ = run("tau2_summary", str(fixture("airline-oracle")), "--require-clean")
    assert "pass^4 0.300000" in out


@pytest.mark.parametrize("command", ["tau2_summary", "tau2_convert", "tau2_scrub", "import_tau2", "benchmark_import"])
def test_bad_input_is_one_line_naming_the_file_exit_2(command, tmp_path, db):
    bad = tmp_path / "bad.json"
    bad.write_text("this is not json")
    args = [command, str(bad)]
    if command in ("import_tau2", "benchmark_import"):
        args += ["--target", "m"] + (["--target-kind", "model"] if command == "benchmark_import" else [])
    error, _ = refused(*args)
    assert error.returncode == 2
    assert str(error).startswith(f"{bad}: not JSON") and "\n" not in str(error)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json"]
    assert BenchmarkRun.objects.count() == 0


def test_exit_statuses_through_manage_py(tmp_path):
    """The real entry point: stderr is one line, statuses 2 and 3."""
    bad = tmp_path / "cut.json"
    bad.write_bytes(fixture("airline-oracle").read_bytes()[:400_000])
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "marina.settings"}
    manage = [sys.executable, str(ROOT / "manage.py")]

    def start(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*manage, *args], capture_output=True, text=True, env=env, cwd=ROOT)

    with ThreadPoolExecutor(2) as pool:  # both at once: each starts Django, seconds apiece
        cut = pool.submit(start, "tau2_summary", str(bad))
        unclean = pool.submit(start, "tau2_summary", str(fixture("airline-infra-errors")), "--require-clean")
    done = cut.result()
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"CommandError: {bad}: truncated: the JSON ends inside `simulations`, after 23 complete simulation(s)"
    ]
    done = unclean.result()
    assert (done.returncode, done.stdout) == (3, "INVALID: 2 infrastructure error(s)\n")


def test_summary_warns_about_a_real_key(tmp_path):
    path = copy_with("airline-oracle", tmp_path / "results.json", new=REAL_LOOKING_KEY)
    _, err = run("tau2_summary", str(path))
    assert err.strip() == (
        f"warning: {path}: this file holds a credential: do not publish it; "
        "`manage.py tau2_scrub` writes a clean copy"
    )


# --- tau2_convert, tau2_scrub -----------------------------------------------------
def test_convert_writes_the_ledger_beside_the_results(tmp_path):
    src = tmp_path / "results.json"
    shutil.copy(fixture("airline-skipped-samples"), src)
    out, _ = run("tau2_convert", str(src))
    target = tmp_path / "results.ledger.json"
    assert out.splitlines()[0] == f"wrote {target} (40 items)"
    assert "2 skipped simulation(s) (failed model calls) counted as failures" in out
    data = json.loads(target.read_text())
    assert data["format"] == "marina-ledger" and data["run"]["skipped"] == 2
    out, _ = run("tau2_convert", str(src), "--out", str(tmp_path / "other.json"), "--json")
    assert json.loads(out)["out"] == str(tmp_path / "other.json")


def test_scrub_writes_a_clean_copy(tmp_path):
    src = copy_with("airline-oracle", tmp_path / "results.json", new=REAL_LOOKING_KEY)
    out, _ = run("tau2_scrub", str(src))
    clean = tmp_path / "results.scrubbed.json"
    assert out.startswith(f"wrote {clean} (2 credential value(s) removed")
    assert REAL_LOOKING_KEY not in clean.read_text()
    _, err = run("tau2_summary", str(clean))
    assert err == ""


# --- benchmark_import, import_tau2 ------------------------------------------------
@pytest.mark.django_db
def test_benchmark_import_records_then_recognises(tmp_path):
    ledgers = []
    for name in ("airline-oracle", "retail-oracle"):
        ledgers.append(tmp_path / f"{name}.ledger.json")
        run("tau2_convert", str(fixture(name)), "--out", str(ledgers[-1]))
    out, _ = run("benchmark_import", *map(str, ledgers), "--target-kind", "model", "--target", "m", "--group", "g")
    assert out.count("recorded run #") == 2
    assert "tau2-retail · model m · group g · 40 simulations" in out
    assert "mean reward 0.775000 · pass^1 0.775000 · pass^2 0.633333 · pass^3 0.550000 · pass^4 0.500000" in out
    out, err = run("benchmark_import", str(ledgers[0]), "--target-kind", "model", "--target", "m", "--json")
    (data,) = json.loads(out)
    assert (data["created"], data["already_imported"], data["group"]) == (False, True, "g")
    assert "already imported as run" in err
    assert BenchmarkRun.objects.count() == 2
    error, _ = refused("benchmark_import", *map(str, ledgers), "--target-kind", "model", "--target", "m",
                       "--cost-usd", "3")  # fmt: skip
    assert error.returncode == 2 and "give exactly one file" in str(error)


@pytest.mark.django_db
def test_import_tau2_json_and_require_clean():
    out, _ = run("import_tau2", str(fixture("airline-infra-errors")), "--target", "m", "--cost-usd", "0.5", "--json")
    data = json.loads(out)
    assert (data["created"], data["infra_errors"], data["cost_usd"], data["cost_source"]) == (
        True, 2, "0.50000000", "cli",
    )  # fmt: skip
    assert [round(p, 6) for p in data["pass_hat_k"]] == [0.725, 0.533333, 0.4]
    error, out = refused("import_tau2", str(fixture("airline-infra-errors")), "--target", "m", "--require-clean")
    assert (error.returncode, out.strip()) == (3, "INVALID: 2 infrastructure error(s)")
    out, _ = run("import_tau2", str(fixture("airline-oracle")), "--target", "m", "--dry-run")
    assert out.startswith("dry run, would record tau2-airline · model m · 40 simulations")
    assert BenchmarkRun.objects.count() == 1


# --- spend ------------------------------------------------------------------------
@pytest.mark.django_db
def test_spend_per_model_and_total():
    rows = [
        (date(2026, 12, 1), "tester", "openrouter/a", 3, 0, 1_500_000_000),
        (date(2026, 12, 2), "tester", "openrouter/a", 2, 0, 250_000_001),
        (date(2026, 12, 2), "ci", "openrouter/a", 1, 1, 0),
        (date(2026, 12, 2), "tester", "openrouter/b", 4, 0, 12_345),
    ]
    for day, key, model, calls, unpriced, cost in rows:
        SpendDaily.objects.create(
            day=day, key_name=key, requested_model=model, provider="openrouter", upstream_model=model,
            calls=calls, unpriced_calls=unpriced, cost_nanousd=cost,
        )  # fmt: skip
    out, _ = run("spend", "--day", "2026-12-02")
    lines = out.splitlines()
    assert lines[0] == "spend_daily, UTC days 2026-12-02"
    assert lines[2].split() == ["openrouter/a", "3", "0", "1", "0", "0", "0.25000000"]
    assert lines[3].split() == ["openrouter/b", "4", "0", "0", "0", "0", "0.00001234"]
    assert lines[4].split() == ["total", "7", "0", "1", "0", "0", "0.25001235"]
    assert lines[5] == "1 unpriced call(s) are not in the cost: it is a lower bound"
    data = json.loads(run("spend", "--since", "2026-12-01", "--json")[0])
    assert (data["first_day"], data["last_day"]) == ("2026-12-01", "2026-12-02")
    assert data["total"]["cost_usd"] == "1.75001235" and data["total"]["calls"] == 10
    assert data["total"]["unpriced_calls"] == 1
    assert [m["model"] for m in data["models"]] == ["openrouter/a", "openrouter/b"]
    error, _ = refused("spend", "--day", "yesterday")
    assert error.returncode == 2


def test_an_unwritable_output_is_named(tmp_path):
    nowhere = tmp_path / "missing-dir" / "out.json"
    for command in ("tau2_convert", "tau2_scrub"):
        error, _ = refused(command, str(fixture("airline-oracle")), "--out", str(nowhere))
        assert (error.returncode, str(error)) == (2, f"{nowhere}: cannot write: No such file or directory")
