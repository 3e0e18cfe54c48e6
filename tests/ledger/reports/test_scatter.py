"""The cost–reward scatter's label placement (ledger/reports/scatter.py): each
label looks only at the boxes within its spots' reach, and lands where looking
at every box would put it; a crowded plot draws every frontier label and, of the
others, only those that overlap nothing."""
from __future__ import annotations

import html
import random
import re

import pytest

from ledger.reports import scatter
from ledger.reports.scatter import Dot, scatter_chart


def _dots(n: int, seed: int) -> list[Dot]:
    """n runs crowded the way a team's frontier is: costs and rewards in clusters, some unknown."""
    rng = random.Random(seed)
    dots = []
    for i in range(n):
        cost = None if i % 17 == 0 else round(rng.choice([0.4, 1.1, 2.5]) + rng.gauss(0, 0.15), 3)
        reward = min(1.0, max(0.0, rng.choice([0.3, 0.55, 0.7]) + rng.gauss(0, 0.05)))
        dots.append(Dot(key=f"run-{i}", label=f"airline · arm-{i % 9} · run {i}", x=cost and abs(cost), y=reward,
                        lo=max(0.0, reward - 0.08), hi=min(1.0, reward + 0.08), on_frontier=i % 11 == 0, short=f"r{i}"))
    return dots


def _chart(dots: list[Dot]) -> str:
    return scatter_chart(dots, title="t", x_title="cost", y_title="pass^1", x_format=lambda v: f"${v:.2f}")


@pytest.mark.parametrize("n, seed", [(12, 1), (60, 2), (200, 3)])
def test_labels_land_where_checking_every_box_puts_them(monkeypatch: pytest.MonkeyPatch, n: int, seed: int) -> None:
    dots = _dots(n, seed)
    within_reach = _chart(dots)
    # A reach wider than the chart: every box is checked, as before the reach was kept.
    monkeypatch.setattr(scatter, "_REACH_X", 10_000)
    monkeypatch.setattr(scatter, "_REACH_UP", 10_000)
    monkeypatch.setattr(scatter, "_REACH_DOWN", 10_000)
    everything = _chart(dots)
    assert within_reach == everything


def test_the_reach_covers_every_spot() -> None:
    """Each spot's box, for a long and a short label, lies inside the reach _place keeps."""
    for text in ("r1", "airline · a much longer arm name · run 12"):
        width = len(text) * scatter._CHAR_W
        for dx, dy, anchor in scatter._SPOTS:
            left = dx if anchor == "start" else dx - width if anchor == "end" else -width / 2
            top, bottom = dy - scatter._LABEL_H + 2, dy + 2
            assert -scatter._REACH_X - width <= left and left + width <= scatter._REACH_X + width
            assert -scatter._REACH_UP <= top and bottom <= scatter._REACH_DOWN


def _boxes(svg: str) -> dict[str, tuple[float, float, float, float]]:
    """Each drawn label's box, by its point's key (the chart's own estimate of a glyph's width)."""
    boxes = {}
    for key, x, y, anchor, text in re.findall(
        r'<text class="point-label" data-key="([^"]*)" x="([\d.-]+)" y="([\d.-]+)" text-anchor="(\w+)"[^>]*>([^<]*)<', svg
    ):
        width = len(html.unescape(text)) * scatter._CHAR_W
        left = float(x) - (width if anchor == "end" else width / 2 if anchor == "middle" else 0)
        boxes[key] = (left, float(y) - 10, left + width, float(y) + 2)
    return boxes


def test_a_crowded_plot_draws_the_frontier_labels_and_only_the_others_that_fit() -> None:
    """200 runs at one cost (a team's replicates of one configuration): labels cannot all fit."""
    dots = [Dot(key=f"run-{i}", label=f"airline · arm · run {i}", x=0.25, y=0.3 + 0.002 * i, lo=0.25 + 0.002 * i,
                hi=0.35 + 0.002 * i, on_frontier=i in (0, 199), short=f"r{i}") for i in range(200)]
    svg = _chart(dots)
    boxes = _boxes(svg)
    assert {"run-0", "run-199"} <= boxes.keys()  # the frontier's, whatever the crowd
    assert 1 < len(boxes) < len(dots)  # some others fitted, most did not
    optional = {key: box for key, box in boxes.items() if key not in ("run-0", "run-199")}
    drawn = list(boxes.values())
    assert not [key for key, box in optional.items() if sum(scatter._overlap(box, other) > 0 for other in drawn) > 1]
    # Every point keeps its tooltip, label drawn or not.
    assert svg.count("<title>airline · arm · run ") == len(dots)
