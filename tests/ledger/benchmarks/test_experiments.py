"""The ledger's record of an experiment, its status, its comparisons and its report pages."""
from __future__ import annotations

import re

import pytest
from django.test import Client

from ledger.benchmarks import experiments
from ledger.models import Experiment
from tests.ledger.builders import flipped, make_run

Outcome = experiments.Outcome
BASE = {f"{t}#{n}": 1.0 if (t + n) % 3 else 0.0 for t in range(1, 11) for n in range(2)}


def open_two_arms(replicates: int = 1) -> Experiment:
    runs = [experiments.PlannedRun(arm, r, model, f"tau2-airline-{arm}")
            for r in range(1, replicates + 1)
            for arm, model in (("single", "m"), ("verify", "marina/verify:m"))]  # fmt: skip
    return experiments.open_experiment(
        name="exp-1", domain="airline", arms=["single", "verify"], settings={"split": "base", "num_trials": 2},
        key_name="repro-exp-1", budget_nanousd=10**9, estimate_nanousd=None, runs=runs,
    )  # fmt: skip


@pytest.mark.django_db
def test_a_complete_experiment_compares_its_own_runs_only() -> None:
    experiment = open_two_arms()
    assert set(experiment.runs.values_list("outcome", flat=True)) == {Outcome.PENDING}
    single = make_run(BASE, group="tau2-airline-single")
    verify = make_run(flipped(BASE, "1#0", "3#1", "5#0"), group="tau2-airline-verify", target="marina/verify:m")
    make_run({k: 0.0 for k in BASE}, group="tau2-airline-verify")  # another experiment's run in the group
    experiments.record_run(experiment, "single", 1, outcome=Outcome.IMPORTED, run=single)
    experiments.record_run(experiment, "verify", 1, outcome=Outcome.IMPORTED, run=verify)
    closed = experiments.close_experiment(experiment, spent_nanousd=123)
    assert (closed.status, closed.spent_nanousd, closed.ended_at is not None) == ("complete", 123, True)
    (compared,) = experiments.arm_comparisons(closed)
    assert compared.comparison is not None
    assert (compared.comparison.a.run_ids, compared.comparison.b.run_ids) == ([single.pk], [verify.pk])
    expected = (sum(flipped(BASE, "1#0", "3#1", "5#0").values()) - sum(BASE.values())) / len(BASE)
    assert compared.comparison.diff_pass1 == pytest.approx(expected)


@pytest.mark.django_db
def test_status_partial_failed_and_stopped() -> None:
    experiment = open_two_arms()
    experiments.record_run(experiment, "single", 1, outcome=Outcome.IMPORTED, run=make_run(BASE))
    experiments.record_run(experiment, "verify", 1, outcome=Outcome.REFUSED, detail="INVALID: 2 infrastructure error(s)")
    closed = experiments.close_experiment(experiment, spent_nanousd=0)
    assert (closed.status, closed.note) == ("partial", "1 of 2 runs not imported")
    (compared,) = experiments.arm_comparisons(closed)
    assert compared.comparison is None and compared.problem == "no imported run of arm 'verify'"

    other = experiments.open_experiment(
        name="exp-2", domain="airline", arms=["single"], settings={}, key_name="k", budget_nanousd=1,
        estimate_nanousd=None, runs=[experiments.PlannedRun("single", 1, "m", "g")],
    )  # fmt: skip
    assert experiments.close_experiment(other, spent_nanousd=5, stopped="interrupted").status == "stopped"
    assert list(other.runs.values_list("outcome", "detail")) == [("stopped", "not finished: interrupted")]
    assert experiments.close_experiment(other, spent_nanousd=0).status == "failed"


@pytest.mark.django_db
def test_experiment_pages_show_the_arms_side_by_side(user_client: Client) -> None:
    experiment = open_two_arms(replicates=2)
    for r in (1, 2):
        experiments.record_run(experiment, "single", r, outcome=Outcome.IMPORTED, run=make_run(BASE))
    experiments.record_run(experiment, "verify", 1, outcome=Outcome.IMPORTED, run=make_run(flipped(BASE, "1#0")))
    experiments.record_run(experiment, "verify", 2, outcome=Outcome.REFUSED, detail="INVALID: 1 infrastructure error(s)")
    experiments.close_experiment(experiment, spent_nanousd=42_000_000)

    listing = user_client.get("/reports/experiments/").content.decode()
    assert f'href="/reports/experiments/{experiment.pk}/">exp-1</a>' in listing
    assert re.search(r"partial.*single, verify.*3 / 4", listing, re.S)

    page = user_client.get(f"/reports/experiments/{experiment.pk}/").content.decode()
    header = re.search(r'<table class="report" id="arms">\s*<thead><tr>(.*?)</tr>', page, re.S)
    assert header and re.findall(r"<th>(\w+)", header.group(1)) == ["single", "verify"]
    assert len(re.findall(r'href="/reports/runs/\d+/"', page)) == 3
    assert 'data-outcome="refused"' in page and "INVALID: 1 infrastructure error(s)" in page
    assert 'title="$0.04200000 exactly" data-figure="spent">$0.0420<' in page  # cents; exact on hover
    assert re.search(r'data-figure="diff-verify">[+−-]0\.0[0-9]+<', page)


@pytest.mark.django_db
def test_experiment_pages_need_a_login(client: Client) -> None:
    for url in ("/reports/experiments/", "/reports/experiments/1/"):
        assert client.get(url)["Location"].startswith("/admin/login/")


@pytest.mark.django_db
def test_run_page_names_its_experiment_and_the_admin_shows_it(user_client: Client, admin_client: Client) -> None:
    experiment = open_two_arms()
    run = make_run(BASE)
    experiments.record_run(experiment, "single", 1, outcome=Outcome.IMPORTED, run=run)
    page = user_client.get(f"/reports/runs/{run.pk}/").content.decode()
    assert re.search(rf'Arm <b>single</b>, replicate 1, of experiment <a href="/reports/experiments/{experiment.pk}/">exp-1</a>', page)
    admin_page = admin_client.get(f"/admin/ledger/experiment/{experiment.pk}/change/").content.decode()
    assert "exp-1" in admin_page and "tau2-airline-verify" in admin_page
    assert admin_client.get("/admin/ledger/experiment/add/").status_code == 403


@pytest.mark.django_db
def test_replicates_are_compared_as_groups_of_this_experiments_runs() -> None:
    experiment = open_two_arms(replicates=2)
    made = {}
    for r in (1, 2):
        made["single", r] = make_run(BASE, group="tau2-airline-single")
        made["verify", r] = make_run(flipped(BASE, f"{r}#0"), group="tau2-airline-verify")
        for arm in ("single", "verify"):
            experiments.record_run(experiment, arm, r, outcome=Outcome.IMPORTED, run=made[arm, r])
    make_run(BASE, group="tau2-airline-single")  # not this experiment's
    (compared,) = experiments.arm_comparisons(experiment)
    assert compared.comparison is not None and compared.comparison.replicates is not None
    assert compared.comparison.a.run_ids == [made["single", 1].pk, made["single", 2].pk]
    assert compared.comparison.b.run_ids == [made["verify", 1].pk, made["verify", 2].pk]
    assert (compared.comparison.a.label, compared.comparison.b.label) == ("tau2-airline-single", "tau2-airline-verify")


@pytest.mark.django_db
def test_the_experiment_page_shows_unpriced_as_unknown_never_zero(user_client: Client) -> None:
    from datetime import date

    from ledger.models import SpendDaily

    experiment = open_two_arms(replicates=1)
    experiments.record_run(experiment, "single", 1, outcome=Outcome.IMPORTED,
                           run=make_run(BASE, cost_nanousd=None, unpriced_calls=24, cost_source="traces"))  # fmt: skip
    SpendDaily.objects.create(day=date(2026, 12, 1), key_name=experiment.key_name, requested_model="openrouter/x",
                              provider="openrouter", upstream_model="x", calls=24, unpriced_calls=24)  # fmt: skip
    experiments.close_experiment(experiment, spent_nanousd=0)
    page = user_client.get(f"/reports/experiments/{experiment.pk}/").content.decode()
    assert 'data-figure="spent">unpriced (24 calls)<' in page
    assert "unpriced (24 calls)" in page.split('id="arms"')[1]
    assert "$0.00000000" not in page.split('id="arms"')[1]


@pytest.mark.django_db
def test_experiment_page_shows_the_power_plan_its_progress_and_the_stopping_rule(user_client: Client) -> None:
    """Issue 46: the plan --detect made, how many of its trials per task are in, and each arm's
    anytime interval with the rule's state (the same figures as ledger.benchmarks.stopping)."""
    from ledger.benchmarks import stopping

    experiment = open_two_arms(replicates=3)
    settings = dict(experiment.settings, detect=0.05, alpha=0.05, stop_when_decided=True, power_plan={
        "detect": 0.05, "alpha": 0.05, "power": 0.8, "tasks": 10, "trials_needed": 8, "replicates_needed": 4,
        "simulations": 160, "cost_nanousd": 4_000_000_000, "detects_as_given": 0.12, "noise": "a prior",
    })  # fmt: skip
    Experiment.objects.filter(pk=experiment.pk).update(settings=settings)
    experiment.refresh_from_db()
    page = user_client.get(f"/reports/experiments/{experiment.pk}/").content.decode()
    assert 'data-trials-needed="8"' in page and "<b>8 trial(s) per task</b>" in page and "80 % power" in page
    assert "0 of 8 trial(s) per task so far" in page
    assert 'data-decided="false"' in page and "no replicate of both imported yet" in page

    experiments.record_run(experiment, "single", 1, outcome=Outcome.IMPORTED, run=make_run(BASE))
    experiments.record_run(experiment, "verify", 1, outcome=Outcome.IMPORTED, run=make_run(flipped(BASE, "1#0")))
    page = user_client.get(f"/reports/experiments/{experiment.pk}/").content.decode()
    assert "2 of 8 trial(s) per task so far" in page  # one replicate of 2 trials
    decision = stopping.state(experiment).arms[0].decision
    assert decision is not None and not decision.decided
    row = page.split('<tr data-arm="verify" data-decided="false">')[1].split("</tr>")[0]
    assert f"[{decision.interval.low:+.3f}, {decision.interval.high:+.3f}]" in row
    assert "holds 0: going on until it excludes 0 or is narrower than 5.0 points" in row
