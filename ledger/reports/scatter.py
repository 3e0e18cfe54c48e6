"""A cost–reward scatter with its Pareto frontier, as an SVG string (the same
conventions as ledger.reports.charts: no script, no CDN, every text escaped).

Points whose cost is unknown are drawn in a strip of their own right of the
plot, labelled "cost unknown": placing them at x = 0 would show them as free."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from ledger.reports.charts import PALETTE, _fmt, _Svg, nice_ticks

_LEFT, _RIGHT, _TOP, _BOTTOM = 60, 16, 16, 48
_UNKNOWN_STRIP = 170


@dataclass(frozen=True)
class Dot:
    key: str
    label: str
    x: float | None  # None: unknown
    y: float
    lo: float | None = None
    hi: float | None = None
    on_frontier: bool = False
    short: str = ""  # the label drawn beside a point off the frontier


def scatter_chart(
    dots: Sequence[Dot],
    *,
    title: str,
    x_title: str,
    y_title: str,
    x_format: Callable[[float], str],
    y_format: Callable[[float], str] = lambda v: f"{v:.2f}",
    width: int = 1100,
    height: int = 440,
) -> str:
    svg = _Svg(width, height, title)
    known = [d for d in dots if d.x is not None]
    unknown = [d for d in dots if d.x is None]
    strip = _UNKNOWN_STRIP if unknown else 0
    plot_right = width - _RIGHT - strip
    plot_h = height - _TOP - _BOTTOM
    x_ticks = nice_ticks(max((d.x or 0.0 for d in known), default=1.0) * 1.08)
    x_top = x_ticks[-1]
    y_ticks = nice_ticks(1.0)

    def x_of(value: float) -> float:
        return _LEFT + (plot_right - _LEFT) * value / x_top

    def y_of(value: float) -> float:
        return _TOP + plot_h * (1 - max(0.0, min(value, 1.0)))

    for tick in y_ticks:
        y = _fmt(y_of(tick))
        svg.add(f'<line class="grid" x1="{_LEFT}" x2="{_fmt(plot_right)}" y1="{y}" y2="{y}" stroke="#e3e3e3"/>')
        svg.add(f'<text class="tick" x="{_LEFT - 6}" y="{y}" text-anchor="end" dominant-baseline="middle" '
                f'font-size="11" fill="#555">{escape(y_format(tick))}</text>')  # fmt: skip
    base = _fmt(y_of(0))
    for tick in x_ticks:
        xs = _fmt(x_of(tick))
        svg.add(f'<line class="grid" x1="{xs}" x2="{xs}" y1="{_TOP}" y2="{base}" stroke="#f0f0f0"/>')
        svg.add(f'<text class="xtick" x="{xs}" y="{_fmt(y_of(0) + 15)}" text-anchor="middle" font-size="11" '
                f'fill="#555">{escape(x_format(tick))}</text>')  # fmt: skip
    svg.add(f'<line class="axis" x1="{_LEFT}" x2="{_fmt(plot_right)}" y1="{base}" y2="{base}" stroke="#777"/>')
    svg.add(f'<line class="axis" x1="{_LEFT}" x2="{_LEFT}" y1="{_TOP}" y2="{base}" stroke="#777"/>')
    svg.add(f'<text class="axis-title" x="{_fmt((_LEFT + plot_right) / 2)}" y="{height - 8}" text-anchor="middle" '
            f'font-size="12" fill="#333">{escape(x_title)}</text>')  # fmt: skip
    svg.add(f'<text class="axis-title" x="14" y="{_fmt(_TOP + plot_h / 2)}" text-anchor="middle" font-size="12" '
            f'fill="#333" transform="rotate(-90 14 {_fmt(_TOP + plot_h / 2)})">{escape(y_title)}</text>')  # fmt: skip

    # The frontier as a staircase: from each frontier point right to the next one's cost, then up.
    front = sorted((d for d in known if d.on_frontier), key=lambda d: (d.x, d.y))
    if front:
        path = [f"M{_fmt(x_of(front[0].x or 0))},{_fmt(y_of(front[0].y))}"]
        for d in front[1:]:
            path.append(f"H{_fmt(x_of(d.x or 0))}V{_fmt(y_of(d.y))}")
        path.append(f"H{_fmt(plot_right)}")
        svg.add(f'<path class="frontier" d="{"".join(path)}" fill="none" stroke="#D55E00" stroke-width="1.5" '
                f'stroke-dasharray="5 3"><title>Pareto frontier</title></path>')  # fmt: skip

    if unknown:
        left = plot_right + 10
        svg.add(f'<rect class="unknown-strip" x="{_fmt(left)}" y="{_TOP}" width="{strip - 14}" height="{_fmt(plot_h)}" '
                f'fill="#f6f6f6" stroke="#ddd"/>')  # fmt: skip
        svg.add(f'<text class="xtick" x="{_fmt(left + (strip - 14) / 2)}" y="{_TOP + 12}" text-anchor="middle" '
                f'font-size="11" fill="#555">cost unknown</text>')  # fmt: skip

    for index, d in enumerate(dots):
        colour = "#D55E00" if d.on_frontier else PALETTE[0] if d.x is not None else "#777"
        if d.x is not None:
            x = x_of(d.x)
        else:
            slot = (strip - 14) / (len(unknown) + 1)
            x = plot_right + 10 + slot * (unknown.index(d) + 1)
        cy = y_of(d.y)
        svg.add(f'<g class="dot" data-key="{escape(d.key)}" data-frontier="{str(d.on_frontier).lower()}">')
        if d.lo is not None and d.hi is not None:
            lo, hi = _fmt(y_of(d.lo)), _fmt(y_of(d.hi))
            svg.add(f'<path class="interval" d="M{_fmt(x)},{lo}V{hi}M{_fmt(x - 4)},{lo}H{_fmt(x + 4)}'
                    f'M{_fmt(x - 4)},{hi}H{_fmt(x + 4)}" stroke="{colour}" stroke-width="1.2" fill="none"/>')  # fmt: skip
        cost = "cost unknown" if d.x is None else x_format(d.x)
        svg.add(f'<circle class="point" cx="{_fmt(x)}" cy="{_fmt(cy)}" r="4.5" fill="{colour}">'
                f"<title>{escape(d.label)}: {escape(y_format(d.y))} at {escape(cost)}</title></circle>")  # fmt: skip
        # Frontier points carry their whole label (target · arm); the others a short one, so a
        # crowded plot stays legible (the whole label is the point's tooltip and the table's row).
        text = d.label if d.on_frontier or d.x is None else (d.short or d.label)
        dy = -9 if index % 2 == 0 else 15  # alternate above and below: neighbours overlap less
        anchor = "end" if d.x is not None and x > plot_right - 7 * len(text) else "start"
        dx = -6 if anchor == "end" else 6
        if d.x is None:
            anchor, dx, text = "middle", 0, text if len(text) <= 26 else text[:25] + "…"
        svg.add(f'<text class="point-label" x="{_fmt(x + dx)}" y="{_fmt(cy + dy)}" text-anchor="{anchor}" '
                f'font-size="10.5" fill="#333">{escape(text)}</text>')  # fmt: skip
        svg.add("</g>")
    return svg.render()
