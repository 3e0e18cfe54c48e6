"""ledger.reports.charts: pure SVG builders, checked by parsing what they return."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from ledger.reports.charts import PALETTE, Point, Series, Stack, line_chart, nice_ticks, stacked_bar_chart

NS = {"s": "http://www.w3.org/2000/svg"}


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # raises on malformed XML, unescaped text included


@pytest.mark.parametrize(
    ("top", "ticks"),
    [
        (1.0, [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),
        (0.73, [0.0, 0.2, 0.4, 0.6, 0.8]),
        (1.75, [0.0, 0.5, 1.0, 1.5, 2.0]),
        (12.0, [0.0, 2.5, 5.0, 7.5, 10.0, 12.5]),
        (0.0, [0.0, 1.0]),
    ],
)
def test_nice_ticks_cover_the_top_in_round_steps(top: float, ticks: list[float]) -> None:
    assert nice_ticks(top) == ticks


def test_line_chart_places_points_and_interval_bars() -> None:
    svg = line_chart(
        ["k=1", "k=2"],
        [Series("A", [Point(0.5, 0.25, 0.75), Point(1.0)])],
        title="pass^k",
        y_max=1.0,
        width=200,
        height=160,
    )
    root = parse(svg)
    assert root.find("s:title", NS).text == "pass^k"
    circles = root.findall(".//s:circle", NS)
    # plot area: top 16, bottom 160 - 44 = 116 (100 px for 0..1); x slots of (200 - 56 - 16) / 2 = 64 px
    assert [(float(c.get("cx")), float(c.get("cy"))) for c in circles] == [(88.0, 66.0), (152.0, 16.0)]
    (bar,) = root.findall(".//s:path[@class='interval']", NS)
    assert bar.get("d").startswith("M88,91V41")  # from 0.25 up to 0.75
    assert circles[0].get("fill") == PALETTE[0]
    assert [t.text for t in root.findall(".//s:text[@class='xlabel']", NS)] == ["k=1", "k=2"]


def test_line_chart_offsets_two_series_and_names_them_in_a_legend() -> None:
    svg = line_chart(
        ["k=1"], [Series("A", [Point(0.5)]), Series("B", [Point(0.5)])], title="t", y_max=1.0
    )
    root = parse(svg)
    xs = [float(c.get("cx")) for c in root.findall(".//s:circle", NS)]
    assert xs[0] < xs[1]  # nudged apart so equal values stay visible
    assert [t.text for t in root.findall(".//s:text[@class='legend']", NS)] == ["A", "B"]
    assert [g.get("data-name") for g in root.findall(".//s:g[@class='series']", NS)] == ["A", "B"]


def test_line_chart_leaves_gaps_for_missing_points() -> None:
    root = parse(line_chart(["1", "2", "3"], [Series("A", [Point(0.2), None, Point(0.4)])], title="t"))
    assert len(root.findall(".//s:circle", NS)) == 2


def test_text_is_escaped() -> None:
    svg = line_chart(["<k>"], [Series('m&"x"<script>', [Point(0.1)])], title="a < b")
    root = parse(svg)
    assert "<script>" not in svg
    assert root.find(".//s:text[@class='legend']", NS).text == 'm&"x"<script>'


def test_stacked_bars_stack_in_order_and_skip_zeros() -> None:
    svg = stacked_bar_chart(
        ["d1", "d2"],
        [Stack("gpt", [1.0, 0.0]), Stack("claude", [0.5, 2.0])],
        title="spend",
        width=216,
        height=160,
    )
    root = parse(svg)
    bars = root.findall(".//s:g[@class='bar']", NS)
    assert [b.get("data-total") for b in bars] == ["1.5", "2"]
    first = bars[0].findall("s:rect", NS)
    assert [r.get("fill") for r in first] == [PALETTE[0], PALETTE[1]]
    # ticks run to 2.0 (0.5 steps); 100 px plot: 1.0 -> 50 px high at the bottom, 0.5 above it
    assert [(float(r.get("y")), float(r.get("height"))) for r in first] == [(66.0, 50.0), (41.0, 25.0)]
    second = bars[1].findall("s:rect", NS)
    assert len(second) == 1 and second[0].get("fill") == PALETTE[1]  # gpt's zero draws nothing
    assert float(second[0].get("height")) == 100.0


def test_stacked_bars_label_every_nth_day_on_long_ranges() -> None:
    days = [f"d{i}" for i in range(60)]
    root = parse(stacked_bar_chart(days, [Stack("m", [1.0] * 60)], title="t", max_labels=10))
    labels = [t.text for t in root.findall(".//s:text[@class='xlabel']", NS)]
    assert labels == [f"d{i}" for i in range(0, 60, 6)]
    assert len(root.findall(".//s:rect[@fill]", NS)) == 60 + 1  # bars + the legend swatch


def test_empty_charts_still_render() -> None:
    parse(stacked_bar_chart([], [], title="nothing"))
    parse(line_chart([], [], title="nothing"))


def test_a_reference_line_is_drawn_once_a_bar_reaches_half_of_it() -> None:
    from ledger.reports.charts import Stack, stacked_bar_chart

    near = stacked_bar_chart(["a", "b"], [Stack("x", [3.0, 6.0])], title="t", reference=("daily cap", 10.0))
    assert near.count('class="reference"') == 1 and "daily cap: 10" in near
    # Far below the cap: no line, and the scale stays around the bars.
    far = stacked_bar_chart(["a", "b"], [Stack("x", [1.0, 2.0])], title="t", reference=("daily cap", 50.0))
    assert 'class="reference"' not in far and ">2</text>" in far and ">50<" not in far
