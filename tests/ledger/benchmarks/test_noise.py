"""ledger.benchmarks.noise: the variance a power plan uses, from comparable runs in the
ledger (paired first, then single runs), else the stated prior; hand-computed."""
from __future__ import annotations

import pytest

from ledger.benchmarks import noise, power
from tests.ledger.builders import make_run

pytestmark = pytest.mark.django_db


def test_without_history_the_prior_is_said() -> None:
    found = noise.from_ledger(domain="airline", task_split="base")
    assert (found.variance, found.source, found.run_ids) == (power.PRIOR_VARIANCE, "prior", [])
    assert found.described.startswith("no comparable runs in the ledger: a conservative prior")


def test_single_runs_give_twice_the_outcome_variance() -> None:
    # Task 1: 1 of 2 -> 1*1/(2*1) = 0.5; task 2: 2 of 2 -> 0; task 3: one trial, left out.
    run = make_run({"1#0": 1.0, "1#1": 0.0, "2#0": 1.0, "2#1": 1.0, "3#0": 0.0})
    make_run({"1#0": 0.0, "1#1": 1.0}, domain="retail", benchmark="tau2-retail")  # another domain: not comparable
    make_run({"1#0": 0.0, "1#1": 1.0}, task_split="test")  # another split: not comparable
    make_run({"1#0": 0.0, "1#1": 1.0}, status="invalid")  # invalid: never history
    found = noise.from_ledger(domain="airline", task_split="base")
    assert found.source == "single runs" and found.run_ids == [run.pk]
    assert found.variance == pytest.approx(2 * (0.5 + 0) / 2)
    assert found.described == (
        f"earlier single runs, two arms taken as independent within a task: variance 0.500 per paired trial, from run(s) #{run.pk}"
    )


def test_paired_runs_give_the_variance_of_the_paired_difference() -> None:
    seeds = {0: 11, 1: 12}
    a = make_run({"1#0": 1.0, "1#1": 0.0, "2#0": 1.0, "2#1": 1.0}, seeds, target="model-a")
    b = make_run({"1#0": 1.0, "1#1": 1.0, "2#0": 0.0, "2#1": 1.0}, seeds, target="model-b")
    make_run({"1#0": 1.0, "1#1": 0.0}, {0: 21, 1: 22}, target="model-c", seed=301)  # another seed: no partner
    # B - A: task 1 [0, 1] -> variance 0.5; task 2 [-1, 0] -> 0.5.
    found = noise.from_ledger(domain="airline", task_split="base")
    assert (found.source, found.run_ids, found.tasks) == ("paired runs", [a.pk, b.pk], 2)
    assert found.variance == pytest.approx(0.5)
    assert "1 earlier pair(s) of arms run with the same seeds" in found.described


def test_comparability_is_keyed_by_every_field_it_names() -> None:
    with pytest.raises(ValueError, match="task_split"):
        noise.comparable_runs(domain="airline")
