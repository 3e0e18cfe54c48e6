"""Server-rendered SVG charts for the report pages: pure functions from
numbers to an SVG string. The machine serving Marina has no internet, so no
CDN chart library; the SVG needs no script and prints as it shows."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape

# Colour-blind-safe palette (Okabe-Ito), cycled when there are more series.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]

# Plot margins: room for y tick labels on the left and x labels below.
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 16, 16, 44


@dataclass(frozen=True)
class Point:
    y: float
    lo: float | None = None  # interval, drawn as an error bar when both are set
    hi: float | None = None


@dataclass(frozen=True)
class Series:
    name: str
    points: Sequence[Point | None]  # one per x label; None leaves a gap
    colour: str = ""


@dataclass(frozen=True)
class Stack:
    name: str
    values: Sequence[float]  # one per category, >= 0
    colour: str = ""


@dataclass
class _Svg:
    width: int
    height: int
    title: str
    parts: list[str] = field(default_factory=list)

    def add(self, part: str) -> None:
        self.parts.append(part)

    def render(self) -> str:
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" '
            f'viewBox="0 0 {self.width} {self.height}" width="{self.width}" height="{self.height}">'
            f"<title>{escape(self.title)}</title>" + "".join(self.parts) + "</svg>"
        )


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least `top` (1-2-5 steps)."""
    if top <= 0 or not math.isfinite(top):
        return [0.0, 1.0]
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    ticks = [0.0]
    while ticks[-1] < top - 1e-12:
        ticks.append(round(ticks[-1] + step, 12))
    return ticks


def _colour(index: int, given: str) -> str:
    return given or PALETTE[index % len(PALETTE)]


def _fmt(value: float) -> str:
    """Coordinates with two decimals: short files, no visible rounding."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _axes(svg: _Svg, ticks: list[float], label: Callable[[float], str], y_of: Callable[[float], float]) -> None:
    right = svg.width - _RIGHT
    for tick in ticks:
        y = _fmt(y_of(tick))
        svg.add(f'<line class="grid" x1="{_LEFT}" x2="{right}" y1="{y}" y2="{y}" stroke="#e3e3e3"/>')
        svg.add(
            f'<text class="tick" x="{_LEFT - 6}" y="{y}" text-anchor="end" dominant-baseline="middle" '
            f'font-size="11" fill="#555">{escape(label(tick))}</text>'
        )
    base = _fmt(y_of(0))
    svg.add(f'<line class="axis" x1="{_LEFT}" x2="{right}" y1="{base}" y2="{base}" stroke="#777"/>')


def _legend(svg: _Svg, names: Sequence[tuple[str, str]], *, top: float) -> None:
    """Rows of swatches from `top` down (under the x labels); long legends wrap."""
    x, y = _LEFT, top
    for name, colour in names:
        width = 18 + 7 * len(name)
        if x + width > svg.width - _RIGHT and x > _LEFT:
            x, y = _LEFT, y + 16
        svg.add(f'<rect class="swatch" x="{x}" y="{y - 9}" width="10" height="10" fill="{colour}"/>')
        svg.add(f'<text class="legend" x="{x + 14}" y="{y}" font-size="11" fill="#333">{escape(name)}</text>')
        x += width + 12


def _legend_rows(width: int, names: Sequence[str]) -> int:
    rows, x = 1, _LEFT
    for name in names:
        item = 18 + 7 * len(name)
        if x + item > width - _RIGHT and x > _LEFT:
            rows, x = rows + 1, _LEFT
        x += item + 12
    return rows


def line_chart(
    x_labels: Sequence[str],
    series: Sequence[Series],
    *,
    title: str,
    y_max: float | None = None,
    y_format: Callable[[float], str] = lambda v: f"{v:g}",
    width: int = 560,
    height: int = 300,
) -> str:
    """Lines with markers over categorical x positions; a point with `lo` and
    `hi` gets a vertical interval bar. Series are offset a little sideways so
    overlapping intervals stay readable."""
    extra = 16 * (_legend_rows(width, [s.name for s in series]) - 1)
    svg = _Svg(width, height + extra, title)
    highs = [p.hi if p.hi is not None else p.y for s in series for p in s.points if p is not None]
    ticks = nice_ticks(y_max if y_max is not None else max(highs, default=1.0))
    top = ticks[-1]
    plot_h = height - _TOP - _BOTTOM

    def y_of(value: float) -> float:
        return _TOP + plot_h * (1 - max(0.0, min(value, top)) / top)

    _axes(svg, ticks, y_format, y_of)
    slot = (width - _LEFT - _RIGHT) / max(len(x_labels), 1)
    for i, text in enumerate(x_labels):
        svg.add(
            f'<text class="xlabel" x="{_fmt(_LEFT + slot * (i + 0.5))}" y="{_TOP + plot_h + 16}" '
            f'text-anchor="middle" font-size="11" fill="#555">{escape(text)}</text>'
        )
    nudge = min(6.0, slot / (2 * max(len(series), 1)))
    for index, s in enumerate(series):
        colour = _colour(index, s.colour)
        shift = (index - (len(series) - 1) / 2) * nudge
        coords = [
            (_LEFT + slot * (i + 0.5) + shift, p) for i, p in enumerate(s.points) if p is not None
        ]
        svg.add(f'<g class="series" data-name="{escape(s.name)}">')
        if len(coords) > 1:
            path = " ".join(f"{_fmt(x)},{_fmt(y_of(p.y))}" for x, p in coords)
            svg.add(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, p in coords:
            if p.lo is not None and p.hi is not None:
                x_s, lo, hi = _fmt(x), _fmt(y_of(p.lo)), _fmt(y_of(p.hi))
                svg.add(
                    f'<path class="interval" d="M{x_s},{lo}V{hi}M{_fmt(x - 4)},{lo}H{_fmt(x + 4)}'
                    f'M{_fmt(x - 4)},{hi}H{_fmt(x + 4)}" stroke="{colour}" stroke-width="1.5" fill="none"/>'
                )
            svg.add(
                f'<circle class="point" cx="{_fmt(x)}" cy="{_fmt(y_of(p.y))}" r="3.5" fill="{colour}">'
                f"<title>{escape(s.name)}: {escape(y_format(p.y))}</title></circle>"
            )
        svg.add("</g>")
    _legend(svg, [(s.name, _colour(i, s.colour)) for i, s in enumerate(series)], top=height - 12)
    return svg.render()


def stacked_bar_chart(
    categories: Sequence[str],
    stacks: Sequence[Stack],
    *,
    title: str,
    y_format: Callable[[float], str] = lambda v: f"{v:g}",
    width: int = 760,
    height: int = 320,
    max_labels: int = 16,
    reference: tuple[str, float] | None = None,
) -> str:
    """One bar per category, each split into the stacks' values in order.
    `reference` (name, value) draws a dashed horizontal line, e.g. a daily cap;
    the scale reaches it only when a bar reaches half of it, so a
    far-off cap does not flatten the bars."""
    extra = 16 * (_legend_rows(width, [s.name for s in stacks]) - 1)
    svg = _Svg(width, height + extra, title)
    totals = [sum(s.values[i] for s in stacks) for i in range(len(categories))]
    highest = max(totals, default=0.0)
    if reference is not None and highest >= 0.5 * reference[1]:
        highest = max(highest, reference[1])
    ticks = nice_ticks(highest)
    top = ticks[-1]
    plot_h = height - _TOP - _BOTTOM

    def y_of(value: float) -> float:
        return _TOP + plot_h * (1 - value / top)

    _axes(svg, ticks, y_format, y_of)
    slot = (width - _LEFT - _RIGHT) / max(len(categories), 1)
    bar = max(slot * 0.7, 1.0)
    # Label every n-th category so long ranges stay legible.
    every = max(1, math.ceil(len(categories) / max_labels))
    for i, text in enumerate(categories):
        x = _LEFT + slot * i + (slot - bar) / 2
        base = 0.0
        svg.add(f'<g class="bar" data-category="{escape(text)}" data-total="{totals[i]:g}">')
        for index, s in enumerate(stacks):
            value = s.values[i]
            if value <= 0:
                continue
            y_top, y_bottom = y_of(base + value), y_of(base)
            svg.add(
                f'<rect x="{_fmt(x)}" y="{_fmt(y_top)}" width="{_fmt(bar)}" height="{_fmt(y_bottom - y_top)}" '
                f'fill="{_colour(index, s.colour)}"><title>{escape(text)} {escape(s.name)}: '
                f"{escape(y_format(value))}</title></rect>"
            )
            base += value
        svg.add("</g>")
        if i % every == 0:
            svg.add(
                f'<text class="xlabel" x="{_fmt(x + bar / 2)}" y="{_TOP + plot_h + 16}" text-anchor="middle" '
                f'font-size="11" fill="#555">{escape(text)}</text>'
            )
    if reference is not None and reference[1] <= top:
        y = _fmt(y_of(reference[1]))
        label = f"{reference[0]}: {y_format(reference[1])}"
        svg.add(
            f'<line class="reference" x1="{_LEFT}" x2="{width - _RIGHT}" y1="{y}" y2="{y}" stroke="#c0392b" '
            f'stroke-dasharray="6 4"><title>{escape(label)}</title></line>'
        )
        svg.add(
            f'<text class="reference-label" x="{width - _RIGHT - 4}" y="{_fmt(float(y) - 4)}" text-anchor="end" '
            f'font-size="11" fill="#c0392b">{escape(label)}</text>'
        )
    _legend(svg, [(s.name, _colour(i, s.colour)) for i, s in enumerate(stacks)], top=height - 12)
    return svg.render()
