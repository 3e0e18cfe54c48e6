"""ledger.benchmarks.importers against the database: figures, idempotency, all-or-nothing,
credentials, cost sources."""
from __future__ import annotations

import io
import json
from datetime import UTC, date, datetime

import pytest
from django.core.management import call_command

from ledger.benchmarks.errors import LedgerInputError, UncleanRunError
from ledger.benchmarks.importers import convert_tau2, import_ledger, import_ledgers, import_tau2
from ledger.models import BenchmarkItem, BenchmarkRun, SpendDaily
from tests.ledger.tau2files import (
    FAKE_KEY,
    NAMES,
    REAL_LOOKING_KEY,
    copy_with,
    expected,
    intended_pass_hat_k,
    truncated,
)
from tests.ledger.tau2files import results as fixture

pytestmark = pytest.mark.django_db


def _spend(day: date, model: str, cost_nanousd: int, calls: int = 1, unpriced: int = 0, key: str = "tester") -> None:
    SpendDaily.objects.create(
        day=day, key_name=key, requested_model=model, provider="openrouter", upstream_model=model,
        calls=calls, unpriced_calls=unpriced, cost_nanousd=cost_nanousd,
    )  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_every_fixture_imports_with_the_expected_figures(name):
    exp = expected(name)
    result = import_tau2(fixture(name), target="openrouter/oracle-agent", group="fixtures", label=name)
    assert result.created
    run = BenchmarkRun.objects.get(pk=result.run.pk)
    assert run.benchmark == f"tau2-{exp['domain']}"
    assert (run.target_kind, run.target, run.group, run.label) == ("model", "openrouter/oracle-agent", "fixtures", name)
    assert (run.agent_model, run.user_model) == ("openrouter/oracle-agent", "openrouter/oracle-user")
    assert (run.seed, run.num_trials, run.simulations) == (300, 4, exp["sims"])
    assert round(run.mean_reward, 6) == exp["avg_reward"]
    assert [round(p, 6) for p in run.pass_hat_k] == intended_pass_hat_k(name)
    assert run.source_name == f"{name}.results.json"
    items = {i.item_id: i for i in run.items.all()}
    assert {k: i.reward for k, i in items.items()} == exp["rewards"]
    assert all(i.correct == (i.reward == 1.0) for i in items.values())
    assert run.comparable is False and run.comparability_reasons
    assert (run.cost_nanousd, run.cost_source) == (None, "none")  # τ²'s $0 is LiteLLM failing to price


def test_run_fields_for_the_infra_fixture():
    run = import_tau2(fixture("airline-infra-errors"), target_kind="crew", target="crew-a").run
    run.refresh_from_db()
    assert (run.target_kind, run.infra_errors, run.skipped, run.evaluated) == ("crew", 2, 0, 38)
    assert (run.tau2_version, run.tau2_commit, run.task_split) == ("sierra-tau2", "unknown", "")
    assert run.started_at == datetime(2026, 12, 2, 11, 38, 18, 290362, tzinfo=UTC)
    assert run.ended_at == datetime(2026, 12, 2, 11, 39, 59, 557959, tzinfo=UTC)
    assert run.agent_args == {"api_base": run.agent_args["api_base"], "temperature": 0.0}
    assert any("infrastructure_error" in r for r in run.comparability_reasons)
    infra = run.items.get(item_id="17#2")
    assert (infra.infra_error, infra.reward, infra.correct, infra.termination_reason) == (
        True, None, False, "infrastructure_error",
    )  # fmt: skip
    ok = run.items.get(item_id="11#0")
    assert ok.reward_breakdown["components"] == {"DB": 1.0, "COMMUNICATE": 1.0}
    assert ok.duration_s == pytest.approx(4.2295, abs=1e-4)


def test_skipped_samples_are_stored_as_failures():
    run = import_tau2(fixture("airline-skipped-samples"), target="m").run
    assert (run.skipped, run.infra_errors) == (2, 0)
    assert sorted(run.items.filter(skipped=True).values_list("item_id", flat=True)) == ["17#2", "18#3"]


def test_reimport_returns_the_existing_run_by_either_path(tmp_path):
    first = import_tau2(fixture("airline-oracle"), target="a")
    again = import_tau2(fixture("airline-oracle"), target="b")
    assert (first.created, again.created, again.existing) == (True, False, True)
    assert again.run.pk == first.run.pk and again.run.target == "a"
    assert "already imported as run" in again.warnings[-1]
    _, ledger_path = convert_tau2(fixture("airline-oracle"), tmp_path / "a.ledger.json")
    via_ledger = import_ledger(ledger_path, target_kind="model", target="c")
    assert (via_ledger.created, via_ledger.run.pk) == (False, first.run.pk)
    assert BenchmarkRun.objects.count() == 1 and BenchmarkItem.objects.count() == 40


def test_ledger_file_import_matches_direct_import(tmp_path):
    _, path = convert_tau2(fixture("retail-oracle"), tmp_path / "r.ledger.json")
    run = import_ledger(path, target_kind="model", target="openrouter/oracle-agent").run
    assert [round(p, 6) for p in run.pass_hat_k] == intended_pass_hat_k("retail-oracle")
    assert run.source_sha256 == json.loads(path.read_text())["source"]["sha256"]
    assert run.items.count() == 40


def test_truncated_file_writes_nothing(tmp_path):
    with pytest.raises(LedgerInputError, match="truncated"):
        import_tau2(truncated("airline-oracle", tmp_path / "cut.json"), target="m")
    assert BenchmarkRun.objects.count() == 0 and BenchmarkItem.objects.count() == 0


def test_one_bad_ledger_among_several_records_none(tmp_path):
    _, good = convert_tau2(fixture("airline-oracle"), tmp_path / "good.ledger.json")
    data = json.loads(good.read_text())
    data["source"]["sha256"] = "0" * 64
    data["items"][-1]["reward"] = "one"
    bad = tmp_path / "bad.ledger.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(LedgerInputError, match="item 40 has a reward that is not a number"):
        import_ledgers([good, bad], target_kind="model", target="m")
    assert BenchmarkRun.objects.count() == 0 and BenchmarkItem.objects.count() == 0


def test_require_clean_refuses_infra_errors():
    with pytest.raises(UncleanRunError) as caught:
        import_tau2(fixture("airline-infra-errors"), target="m", require_clean=True)
    assert caught.value.infra_errors == 2
    assert BenchmarkRun.objects.count() == 0
    assert import_tau2(fixture("airline-skipped-samples"), target="m", require_clean=True).created


def test_dry_run_writes_nothing():
    result = import_tau2(fixture("airline-oracle"), target="m", dry_run=True, cost_usd=2)
    assert (result.created, result.dry_run, result.run.pk, result.items) == (False, True, None, 40)
    assert result.run.cost_nanousd == 2_000_000_000
    assert BenchmarkRun.objects.count() == 0


def test_no_credential_reaches_the_database(tmp_path):
    for name in NAMES:
        import_tau2(fixture(name), target=name)
    real = copy_with("retail-oracle", tmp_path / "real.json", new=REAL_LOOKING_KEY)
    result = import_tau2(real, target="real")
    assert any("this file holds a credential: do not publish it" in w for w in result.warnings)
    dump = io.StringIO()
    call_command("dumpdata", "ledger", stdout=dump)
    text = dump.getvalue()
    assert '"model": "ledger.benchmarkitem"' in text  # the dump really holds the imports
    assert FAKE_KEY not in text and REAL_LOOKING_KEY not in text and "api_key" not in text


# --- cost -------------------------------------------------------------------------
def test_cost_from_the_command_line():
    run = import_tau2(fixture("airline-oracle"), target="m", cost_usd=1.23456789).run
    assert (run.cost_nanousd, run.cost_source) == (1_234_567_890, "cli")


def test_cost_from_marina_spend_sums_the_runs_models_over_its_utc_days():
    day = date(2026, 12, 2)  # the fixture ran 11:41-11:42 on this day
    _spend(day, "openrouter/oracle-agent", 700_000_000, calls=30)
    _spend(day, "openrouter/oracle-agent", 50_000_000, calls=2, key="other-key")
    _spend(day, "openrouter/oracle-user", 200_000_000, calls=40)
    _spend(day, "openrouter/someone-else", 9_000_000_000)
    _spend(date(2026, 12, 3), "openrouter/oracle-agent", 9_000_000_000)
    result = import_tau2(fixture("airline-oracle"), target="m", cost_from_spend=True)
    assert (result.run.cost_nanousd, result.run.cost_source) == (950_000_000, "spend")
    assert "2026-12-02 (UTC)" in result.cost_note and result.warnings == []


def test_cost_from_spend_warns_about_unpriced_calls_and_refuses_when_there_is_none():
    none_recorded = "Marina recorded no calls to openrouter/oracle-agent, openrouter/oracle-user"
    with pytest.raises(LedgerInputError, match=none_recorded) as refused:
        import_tau2(fixture("airline-oracle"), target="m", cost_from_spend=True)
    # Says when the option applies and what to do instead (a file not run through this Marina).
    assert "only to a run whose model calls went through this Marina" in str(refused.value)
    assert "give --cost-usd" in str(refused.value)
    assert BenchmarkRun.objects.count() == 0
    _spend(date(2026, 12, 2), "openrouter/oracle-user", 10, calls=5, unpriced=2)
    result = import_tau2(fixture("airline-oracle"), target="m", cost_from_spend=True)
    assert result.run.cost_nanousd == 10
    assert "2 of 5 calls to these models were unpriced" in result.warnings[0]


def test_cost_from_taus_own_figures_when_every_simulation_has_them(tmp_path):
    _, path = convert_tau2(fixture("airline-infra-errors"), tmp_path / "l.json")
    data = json.loads(path.read_text())
    for item in data["items"]:
        if not item["infra_error"]:
            item["agent_cost_usd"], item["user_cost_usd"] = 0.01, 0.002
    run = import_ledger(data, target_kind="model", target="m").run
    assert (run.cost_nanousd, run.cost_source) == (38 * 12_000_000, "tau2")
    data["source"]["sha256"] = "1" * 64
    data["items"][0]["user_cost_usd"] = None
    run = import_ledger(data, target_kind="model", target="m").run
    assert (run.cost_nanousd, run.cost_source) == (None, "none")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"target_kind": "team"}, "--target-kind must be one of model, crew"),
        ({"target": ""}, "--target must be"),
        ({"group": "has space"}, "--group must be"),
        ({"cost_usd": -1}, "--cost-usd must be a number of dollars from 0 to"),
        ({"cost_usd": 1, "cost_from_spend": True}, "not both"),
    ],
)
def test_bad_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        import_tau2(fixture("airline-oracle"), **{"target": "m", **options})


@pytest.mark.django_db
def test_the_split_the_harness_ran_is_recorded_when_the_file_has_none():
    # τ²'s results.json records no split; the kit ran --task-split-name base and says so.
    from ledger.benchmarks.importers import import_tau2
    from tests.ledger.tau2files import results

    plain = import_tau2(results("airline-oracle"), target="openrouter/oracle-agent", dry_run=True).run
    assert plain.task_split == "" or any("does not record its task split" in r for r in plain.comparability_reasons)
    told = import_tau2(results("retail-oracle"), target="openrouter/oracle-agent", task_split="base").run
    told.refresh_from_db()
    assert told.task_split == "base"
    assert not any("does not record its task split" in r for r in told.comparability_reasons)
