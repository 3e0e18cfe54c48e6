"""A several-domain experiment (`repro_tau2 --board`): entries `<domain>/<arm>`, each domain's arms
compared with that domain's baseline, never across domains; its spend shown per domain."""
from __future__ import annotations

import pytest

from ledger.benchmarks import experiments
from ledger.reports import live
from repro.runner import domain_spend
from tests.ledger.builders import fixture_rewards, flipped, make_run

pytestmark = pytest.mark.django_db


def test_each_domain_is_compared_with_its_own_baseline():
    airline, retail = fixture_rewards("airline-oracle"), fixture_rewards("retail-oracle")
    entries = ["airline/single", "airline/verify", "retail/single", "retail/verify"]
    experiment = experiments.open_experiment(
        name="tau2-board-x", domain="airline,retail", arms=entries,
        settings={"domains": ["airline", "retail"], "tasks": 50, "num_trials": 4, "domain_tasks": {"airline": 50, "retail": 114}},
        key_name="repro-x", budget_nanousd=10**9, estimate_nanousd=None,
        runs=[experiments.PlannedRun(e, 1, "m", f"tau2-{e.replace('/', '-')}") for e in entries],
    )  # fmt: skip
    runs = {
        "airline/single": make_run(airline),
        "airline/verify": make_run(flipped(airline, "7#0")),
        "retail/single": make_run(retail, benchmark="tau2-retail", domain="retail"),
        "retail/verify": make_run(flipped(retail, "0#0"), benchmark="tau2-retail", domain="retail"),
    }
    for n, (entry, run) in enumerate(runs.items()):
        experiments.record_run(experiment, entry, 1, outcome=experiments.Outcome.IMPORTED, run=run,
                               spent_nanousd=(n + 1) * 1_000_000)  # fmt: skip
    compared = experiments.arm_comparisons(experiment, resamples=50)
    assert [(c.arm, c.baseline) for c in compared] == [("airline/verify", "airline/single"), ("retail/verify", "retail/single")]
    for c in compared:
        assert c.comparison is not None
        assert not any("benchmark" in w for w in c.comparison.warnings), c.comparison.warnings
    assert domain_spend(experiment) == "by domain: airline $0.00300000 · retail $0.00700000"
    # Progress per entry, each planned at its own domain's tasks × trials.
    planned = {a.arm: a.planned for a in live.experiment_progress(experiment).arms}
    assert planned == {"airline/single": 200, "airline/verify": 200, "retail/single": 456, "retail/verify": 456}
