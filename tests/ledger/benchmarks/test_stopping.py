"""ledger.benchmarks.stopping on an experiment record: the anytime interval over the
replicates both sides imported, paired by task and trial seed, and the plan's progress."""
from __future__ import annotations

import pytest

from ledger.benchmarks import experiments, stopping
from ledger.benchmarks.sequential import ConfidenceSequence
from ledger.models import Experiment
from tests.ledger.builders import make_run

pytestmark = pytest.mark.django_db
TASKS = ["7", "11", "14", "15"]


def _experiment(replicates: int, name: str = "e", **settings: object) -> Experiment:
    return experiments.open_experiment(
        name=name, domain="airline", arms=["single", "sure"], key_name="repro-e", budget_nanousd=None,
        estimate_nanousd=None, settings={"num_trials": 4, **settings},
        runs=[experiments.PlannedRun(arm, r, "m", f"g-{arm}") for r in range(1, replicates + 1) for arm in ("single", "sure")],
    )  # fmt: skip


def _import(experiment: Experiment, arm: str, replicate: int, reward: float) -> None:
    seeds = {k: 1000 * replicate + k for k in range(4)}
    run = make_run({f"{t}#{k}": reward for t in TASKS for k in range(4)}, seeds, seed=300 + replicate - 1)
    experiments.record_run(experiment, arm, replicate, outcome=experiments.Outcome.IMPORTED, run=run)


def test_the_interval_grows_replicate_by_replicate_until_decided() -> None:
    experiment = _experiment(3, detect=0.05, alpha=0.05)
    assert stopping.state(experiment).arms[0].decision is None  # nothing imported yet
    _import(experiment, "single", 1, 0.0)
    _import(experiment, "sure", 1, 1.0)
    first = stopping.state(experiment)
    expected = ConfidenceSequence().extend([1] * 16).interval()
    assert first.arms[0].replicates == 1 and first.arms[0].decision.interval == expected
    assert not first.decided and "holds 0" in first.reason
    _import(experiment, "single", 2, 0.0)
    assert stopping.state(experiment).arms[0].replicates == 1  # the arm's replicate 2 is not in yet
    _import(experiment, "sure", 2, 1.0)
    second = stopping.state(experiment)
    assert second.decided and second.arms[0].decision.interval == ConfidenceSequence().extend([1] * 32).interval()
    assert second.reason.startswith("sure: the anytime 95% interval [+25.9, +100.0] points excludes 0")


def test_paired_by_trial_seed_not_by_position() -> None:
    # A's trial seeds in the other order: item 7#0 of A has B's 7#3 seed. A passes only trial 0.
    a = make_run({"7#0": 1.0, "7#1": 0.0}, {0: 2, 1: 1})
    b = make_run({"7#0": 0.0, "7#1": 1.0}, {0: 1, 1: 2})
    # Seed 1: A's trial 1 (0) with B's trial 0 (0) -> 0; seed 2: A's trial 0 (1) with B's trial 1 (1) -> 0.
    assert stopping.paired_differences(a.pk, b.pk) == [0, 0]


def test_close_after_a_decision_is_complete_with_the_reason() -> None:
    experiment = _experiment(2, power_plan={"trials_needed": 16, "replicates_needed": 4})
    for r in (1,):
        _import(experiment, "single", r, 0.0)
        _import(experiment, "sure", r, 1.0)
    progress = stopping.plan_progress(experiment)
    assert progress is not None and (progress.replicates_done, progress.trials_done, progress.percent) == (1, 4, 25)
    for arm in ("single", "sure"):
        experiments.record_run(experiment, arm, 2, outcome=experiments.Outcome.STOPPED, detail="not run: decided")
    closed = experiments.close_experiment(experiment, spent_nanousd=0, decided="decided after 1 of 2 replicate(s)")
    assert (closed.status, closed.note) == ("complete", "decided after 1 of 2 replicate(s)")
    assert stopping.plan_progress(_experiment(1, "no-plan")) is None  # no --detect, no plan
