"""Replicate statistics of `compare --group A --group B` (reference §5.4)
against figures computed by hand for a small fixture: 4 tasks × 2 trials,
two runs per side. Successes per task (tasks 1..4):

    A1 [2, 1, 0, 0]  pass^1 0.375      B1 [2, 2, 2, 0]  pass^1 0.75
    A2 [2, 0, 0, 1]  pass^1 0.375      B2 [2, 2, 1, 0]  pass^1 0.625

between-run SD: A 0, B sqrt(2 · 0.0625² / 1) = 0.0883883…; tasks where every
run agrees: A 1 and 3 (0.5), B 1, 2 and 4 (0.75); pooled pass^1: A
(1 + 1/4 + 0 + 1/4)/4 = 0.375, B (1 + 1 + 3/4 + 0)/4 = 0.6875, B − A 0.3125;
McNemar per matched pair (same seed; discordant a_only/b_only → p): A1·B1
(seed 300) 0/3 → 2/8 = 0.25, A2·B2 (seed 301) 1/3 → 2·5/16 = 0.625; the
unmatched A1·B2 (0.5) and A2·B1 (0.375) are not paired samples and not in
the range."""
from __future__ import annotations

import json
import math

import pytest

from ledger.benchmarks import stats
from ledger.benchmarks.compare import compare_groups
from ledger.benchmarks.compare_text import render_text
from ledger.reports.compare_json import as_json
from tests.ledger.builders import make_run

CORRECT = {
    "A1": {"1#0", "1#1", "2#0"},
    "A2": {"1#0", "1#1", "4#0"},
    "B1": {"1#0", "1#1", "2#0", "2#1", "3#0", "3#1"},
    "B2": {"1#0", "1#1", "2#0", "2#1", "3#0"},
}
ITEMS = [f"{t}#{n}" for t in "1234" for n in (0, 1)]


@pytest.fixture
def groups(db):
    for n, (name, correct) in enumerate(CORRECT.items()):
        make_run({i: 1.0 if i in correct else 0.0 for i in ITEMS}, group=name[0], seed=300 + n % 2)


def test_replicate_statistics_match_the_hand_computed_figures(groups):
    c = compare_groups("A", "B", resamples=400, seed=3)
    r = c.replicates
    assert (r.a_runs, r.b_runs) == (2, 2)
    assert r.a_pass1 == [0.375, 0.375] and r.b_pass1 == [0.75, 0.625]
    assert r.a_sd == 0.0 and r.b_sd == pytest.approx(math.sqrt(2 * 0.0625**2))
    assert (r.a_agree, r.b_agree) == (0.5, 0.75)
    assert r.diff == pytest.approx(0.3125) and c.diff_pass1 == pytest.approx(0.3125)
    assert (r.mcnemar_min, r.mcnemar_max, r.pairs) == (0.25, 0.625, 2)
    # The bootstrap p from the same two-stage draws the interval uses, by the original's formula.
    counts = {k: [(sum(f"{t}#{n}" in v for n in (0, 1)), 2) for t in "1234"] for k, v in CORRECT.items()}
    draws = stats.two_stage_bootstrap([counts["A1"], counts["A2"]], [counts["B1"], counts["B2"]], resamples=400, seed=3)
    low, high = sum(d <= 0 for d in draws), sum(d >= 0 for d in draws)
    assert r.bootstrap_p == min(1.0, 2 * (min(low, high) + 1) / 401)
    assert 0 < r.bootstrap_p < 1

    data = as_json(c)
    assert data["sign"] == "B - A" and data["replicates"]["mcnemar_p_range"] == [0.25, 0.625]
    json.dumps(data)
    text = render_text(c)
    assert text.splitlines()[0].endswith("every difference is B - A")
    assert "between-run SD 0.0000" in text and "between-run SD 0.0884" in text
    assert "all runs agree on 50.0% of tasks" in text and "all runs agree on 75.0% of tasks" in text
    assert "exact McNemar p per replicate pair: 0.2500 .. 0.6250 (2 pair(s))" in text


def test_bootstrap_p_by_hand():
    assert stats.bootstrap_p([0.1, 0.2, 0.3]) == 0.5  # 2 (0 + 1) / 4
    assert stats.bootstrap_p([-0.1, 0.0, 0.2, 0.3]) == 1.0  # 2 (2 + 1) / 5, capped
    assert stats.bootstrap_p([-0.2] * 9) == 0.2  # 2 (0 + 1) / 10
    assert stats.sample_sd([1.0]) is None and stats.sample_sd([1.0, 3.0]) == pytest.approx(math.sqrt(2))


def test_two_runs_have_no_replicate_section(groups):
    from ledger.benchmarks.compare import compare_runs
    from ledger.models import BenchmarkRun

    a, b = BenchmarkRun.objects.order_by("pk")[:2]
    c = compare_runs(a, b, resamples=50)
    assert c.replicates is None and as_json(c)["replicates"] is None and "replicates:" not in render_text(c)


@pytest.mark.django_db
def test_compare_breaks_the_difference_down_by_formation_decision():
    from ledger.benchmarks.compare import compare_runs
    from ledger.models import BenchmarkItem

    a = make_run({"1#0": 0.0, "1#1": 1.0, "2#0": 1.0, "2#1": 0.0})
    b = make_run({"1#0": 1.0, "1#1": 1.0, "2#0": 0.0, "2#1": 0.0}, target="marina/verify:openrouter/oracle-agent")
    for item_id, decided in (("1#0", {"verify": {"revised": 1, "approved": 2}}), ("1#1", {"verify": {"approved": 3}}),
                             ("2#0", {"verify": {"approved": 2}})):  # fmt: skip
        BenchmarkItem.objects.filter(run=b, item_id=item_id).update(decisions=decided, link_status="linked")
    c = compare_runs(a, b, resamples=20)
    rows = {(r.side, r.decision): (r.items, r.successes, r.other_successes, r.diff) for r in c.decisions}
    assert rows == {
        ("A", "none"): (4, 2, 2, 0.0),
        ("B", "verify: approved"): (2, 1, 2, -0.5),
        ("B", "verify: approved+revised"): (1, 1, 0, 1.0),
        ("B", "verify: none"): (1, 0, 0, 0.0),
    }
    text = render_text(c)
    assert "B verify: approved+revised: 1 item(s), pass 100.0%  other side on these items 0.0%  B - A +100.0%" in text
    assert as_json(c)["decisions"][1]["decision"] == "verify: approved"


# Replicates as the kit runs them: each replicate its own seed, so its own trial seeds.
SEEDS = {300: {0: 626729, 1: 373753}, 301: {0: 10001, 1: 10002}}


def test_the_mcnemar_range_covers_only_runs_of_one_seed(db):
    # Same outcomes as above; only matched pairs (seed 300 with 300, 301 with 301) count.
    for n, (name, correct) in enumerate(CORRECT.items()):
        seed = 300 + n % 2
        make_run({i: 1.0 if i in correct else 0.0 for i in ITEMS}, SEEDS[seed], group=name[0], seed=seed)
    r = compare_groups("A", "B", resamples=50).replicates
    assert r is not None and r.pairs == 2 and (r.mcnemar_min, r.mcnemar_max) == (0.25, 0.625)


def test_items_are_paired_by_task_and_trial_seed_not_trial_number(db):
    # B recorded the same trial seeds in the other trial order (trial 0 ran seed 373753):
    # paired by seed, A and B agree on every simulation; by trial number they would not.
    a = make_run({"1#0": 1.0, "1#1": 0.0, "2#0": 1.0, "2#1": 0.0}, {0: 626729, 1: 373753}, group="A")
    b = make_run({"1#0": 0.0, "1#1": 1.0, "2#0": 0.0, "2#1": 1.0}, {0: 373753, 1: 626729}, group="B")
    from ledger.benchmarks.compare import compare_runs

    c = compare_runs(a, b, resamples=50)
    assert (c.a_only, c.b_only) == (0, 0) and c.mcnemar_p == 1.0
    assert not any("trial number" in w for w in c.warnings)


def test_runs_without_a_trial_seed_in_common_say_they_are_paired_by_trial_number(db):
    from ledger.benchmarks.compare import compare_runs

    a = make_run({"1#0": 1.0, "1#1": 0.0}, SEEDS[300], seed=300)
    b = make_run({"1#0": 0.0, "1#1": 0.0}, SEEDS[301], seed=301)
    c = compare_runs(a, b, resamples=50)
    assert (c.a_only, c.b_only) == (1, 0)
    assert any("no trial seed in common" in w and "paired by trial number" in w for w in c.warnings)


def test_a_run_on_both_sides_counts_on_each(groups):
    # compare_run_sets loads every run's items in one query (compare._load): a run given on both
    # sides is one set of items that each side pools, as two loads of it were.
    from ledger.benchmarks.compare import compare_run_sets
    from ledger.models import BenchmarkRun

    a1, a2, b1, _ = BenchmarkRun.objects.order_by("pk")
    c = compare_run_sets([a1, a2], [a2, b1], label_a="A", label_b="B", resamples=50)
    assert (c.a.run_ids, c.b.run_ids) == ([a1.pk, a2.pk], [a2.pk, b1.pk])
    assert (c.a.items, c.b.items) == (16, 16)
    assert c.a.pass_hat_k[0] == 0.375 and c.b.pass_hat_k[0] == pytest.approx((3 + 6) / 16)
    assert f"run(s) #{a2.pk} are on both sides" in c.warnings
