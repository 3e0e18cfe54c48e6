"""The reads behind the report pages that the view tests do not pin down."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ledger.benchmarks.stats import pass_hat_k_intervals, wilson_of_mean
from ledger.models import Span, Trace
from ledger.reports.selectors import span_tree, task_key


def test_intervals_are_reproducible_and_contain_the_estimate() -> None:
    tasks = [[True, True, False, True], [False, False, True, False], [True] * 4, [False] * 4, [True, False] * 2]
    first = pass_hat_k_intervals(tasks, max_k=4, resamples=500, seed=3)
    assert first == pass_hat_k_intervals(tasks, max_k=4, resamples=500, seed=3)
    # The seed drives the draws (five tasks give few distinct means: some seeds agree).
    assert len({tuple(pass_hat_k_intervals(tasks, max_k=4, resamples=50, seed=s)) for s in range(6)}) > 1
    estimates = [0.5, 1 / 3, 0.25, 0.2]  # pass^1..4 of these tasks, by hand
    for (lo, hi), value in zip(first, estimates):
        assert 0 <= lo <= value <= hi <= 1
    assert first[0][1] - first[0][0] > 0.2  # five tasks: a wide interval


def test_identical_or_few_tasks_never_give_a_zero_width_interval() -> None:
    # Once [(0.5, 0.5), (0.0, 0.0)]: six tasks alike resample to one mean. Now at least Wilson's over six.
    (lo1, hi1), (lo2, hi2) = pass_hat_k_intervals([[True, False]] * 6, max_k=2, resamples=50)
    assert (lo1, hi1) == pytest.approx(wilson_of_mean(0.5, 6)) and lo1 < 0.5 < hi1
    assert lo2 == 0.0 and hi2 == pytest.approx(wilson_of_mean(0.0, 6)[1]) and hi2 > 0.3
    (lo, hi), = pass_hat_k_intervals([[True, True]] * 2, max_k=1, resamples=50)
    assert hi == 1.0 and lo < 0.5, "two tasks that passed: not [1.000, 1.000]"
    assert pass_hat_k_intervals([], max_k=2) == []


def test_many_tasks_keep_the_bootstrap_interval() -> None:
    tasks = [[True, False]] * 20 + [[True, True]] * 20
    (lo, hi), = pass_hat_k_intervals(tasks, max_k=1, resamples=400, seed=1)
    assert 0.75 - lo < 0.12 and hi - 0.75 < 0.12, "narrower than Wilson's over 40 tasks"
    assert (lo, hi) != pytest.approx(wilson_of_mean(0.75, 40))


def test_task_ids_sort_naturally() -> None:
    assert sorted(["11", "7", "b", "a", "100"], key=task_key) == ["7", "11", "100", "a", "b"]


@pytest.mark.django_db
def test_span_tree_orders_children_under_parents_and_survives_bad_parents() -> None:
    start = datetime(2025, 1, 1, tzinfo=UTC)
    trace = Trace.objects.create(
        request_id="r", started_at=start, duration_ms=100.0, path="/v1/chat/completions", status="ok", http_status=200
    )

    def span(seq: int, parent: int | None, offset_ms: float) -> None:
        Span.objects.create(
            trace=trace, seq=seq, parent_seq=parent, name=f"s{seq}", status="ok",
            started_at=start + timedelta(milliseconds=offset_ms), duration_ms=10.0,
        )  # fmt: skip

    span(1, None, 0)
    span(2, 1, 10)
    span(3, 2, 20)
    span(4, 1, 50)
    span(5, 9, 60)  # parent never recorded: shown at the root
    span(6, 7, 70)  # 6 and 7 name each other: still shown
    span(7, 6, 80)
    nodes = span_tree(trace)
    assert [(n.span.seq, n.depth) for n in nodes] == [(1, 0), (2, 1), (3, 2), (4, 1), (5, 0), (6, 0), (7, 1)]
    assert [n.offset_ms for n in nodes[:4]] == [0.0, 10.0, 20.0, 50.0]
    assert nodes[3].bar_left == pytest.approx(50.0) and nodes[3].bar_width == pytest.approx(10.0)
