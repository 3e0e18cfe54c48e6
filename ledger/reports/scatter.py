"""A cost–reward scatter with its Pareto frontier, as an SVG string (the same
conventions as ledger.reports.charts: no script, no CDN, every text escaped).

Points whose cost is unknown are drawn in a strip of their own right of the
plot, labelled "cost unknown": placing them at x = 0 would show them as free."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from ledger.reports.charts import PALETTE, _fmt, _Svg, nice_ticks

_LEFT, _RIGHT, _TOP, _BOTTOM = 60, 16, 16, 70
_UNKNOWN_STRIP = 170  # at least; wide enough for its longest label
_CHAR_W, _LABEL_H = 6.0, 12.0  # a 10.5 px label's average character width and line height
_FRONTIER, _OFF, _UNKNOWN = "#D55E00", PALETTE[0], "#777"

Box = tuple[float, float, float, float]  # left, top, right, bottom
# Label spots around a point, nearest first: (dx, baseline dy, anchor). The farther ones
# clear a cluster of interval bars at nearly the same cost.
_SPOTS = [
    *((dx, dy, anchor) for dy in (-6, 14, 4) for dx, anchor in ((7, "start"), (-7, "end"))),
    (0, -10, "middle"), (0, 20, "middle"),
    *((dx, dy, anchor) for dy in (-20, 28, -34, 42, -48, 56) for dx, anchor in ((7, "start"), (-7, "end"), (0, "middle"))),
    *((sign * far, dy, anchor) for far in (20, 34, 50) for dy in (4, -6, 14, -20, 28, -34, 42)
      for sign, anchor in ((1, "start"), (-1, "end"))),
]  # fmt: skip


# How far from its point a label's box can reach, over all the spots: boxes farther away can
# overlap none of them, so _place leaves them out of what it checks.
_REACH_X = max(abs(dx) for dx, _, _ in _SPOTS)
_REACH_UP = _LABEL_H - 2 - min(dy for _, dy, _ in _SPOTS)
_REACH_DOWN = max(dy for _, dy, _ in _SPOTS) + 2


def _overlap(a: Box, b: Box) -> float:
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    return width * height if width > 0 and height > 0 else 0.0


def _within(box: Box, others: list[Box]) -> list[Box]:
    """Those of `others` that overlap `box` (touching edges do not overlap)."""
    left, top, right, bottom = box
    return [o for o in others if o[0] < right and o[2] > left and o[1] < bottom and o[3] > top]


def _clear(box: Box, others: list[Box]) -> bool:
    """Whether `box` overlaps none of `others` (touching edges do not overlap), newest first: a spot
    is most often blocked by a label just placed beside it."""
    left, top, right, bottom = box
    return not any(o[0] < right and o[2] > left and o[1] < bottom and o[3] > top for o in reversed(others))


def _place(x: float, y: float, text: str, taken: list[Box], bounds: Box, *, always: bool) -> tuple[float, float, str, Box] | None:
    """Where a point's label goes: the first of the spots around the point (`_SPOTS`) that overlaps no
    other label, point or interval bar and stays inside `bounds`. Where none does, a label that must
    show (`always`: a frontier point's) takes the least overlapping spot, and any other is not drawn
    (None): its point's tooltip and the table's row still name it, as a chart that hides the labels
    it cannot place clear does. Returns the text's x, baseline y, anchor and its box (added to
    `taken` by the caller).

    Why only the frontier's labels are forced: finding the least overlapping spot sums every
    overlap of every spot, and with hundreds of runs at one cost (a crowded plot, where forced
    labels only pile up) that was 6 M overlaps, 3.7 s of CPU for the page (docs/performance.md)."""
    width = len(text) * _CHAR_W
    # Only what lies within the spots' reach can overlap a spot.
    reach = (x - _REACH_X - width, y - _REACH_UP, x + _REACH_X + width, y + _REACH_DOWN)
    near = _within(reach, taken)
    best: tuple[float, tuple[float, float, str, Box]] | None = None
    for dx, dy, anchor in _SPOTS:
        left = x + dx if anchor == "start" else x + dx - width if anchor == "end" else x - width / 2
        box = (left, y + dy - _LABEL_H + 2, left + width, y + dy + 2)
        outside = max(0.0, bounds[0] - box[0]) + max(0.0, box[2] - bounds[2]) + max(0.0, bounds[1] - box[1]) + max(0.0, box[3] - bounds[3])
        if not outside and _clear(box, near):
            return x + dx, y + dy, anchor, box
        if always:
            cost = sum(_overlap(box, other) for other in near) + outside * 100
            if best is None or cost < best[0]:
                best = (cost, (x + dx, y + dy, anchor, box))
    return best[1] if best else None


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
    longest = max((len(d.label) for d in unknown), default=0)
    strip = max(_UNKNOWN_STRIP, min(int(longest * _CHAR_W) + 90, width // 3)) if unknown else 0
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
    svg.add(f'<text class="axis-title" x="{_fmt((_LEFT + plot_right) / 2)}" y="{height - 30}" text-anchor="middle" '
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

    # Points and bars first, so every label can keep clear of all of them.
    placed: list[tuple[Dot, float, float, str]] = []
    taken: list[Box] = [(plot_right + 10, _TOP, width - _RIGHT, _TOP + 16)] if unknown else []  # the strip's heading
    for d in dots:
        colour = _FRONTIER if d.on_frontier else _OFF if d.x is not None else _UNKNOWN
        if d.x is not None:
            x = x_of(d.x)
        else:  # near the strip's left edge, a few pixels apart: their labels go to the right
            x = plot_right + 24 + 12 * (unknown.index(d) % 4)
        cy = y_of(d.y)
        placed.append((d, x, cy, colour))
        taken.append((x - 5, cy - 5, x + 5, cy + 5))
        if d.lo is not None and d.hi is not None:
            taken.append((x - 4, y_of(d.hi), x + 4, y_of(d.lo)))
    for d, x, cy, colour in placed:
        svg.add(f'<g class="dot" data-key="{escape(d.key)}" data-frontier="{str(d.on_frontier).lower()}">')
        if d.lo is not None and d.hi is not None:
            lo, hi = _fmt(y_of(d.lo)), _fmt(y_of(d.hi))
            svg.add(f'<path class="interval" d="M{_fmt(x)},{lo}V{hi}M{_fmt(x - 4)},{lo}H{_fmt(x + 4)}'
                    f'M{_fmt(x - 4)},{hi}H{_fmt(x + 4)}" stroke="{colour}" stroke-width="1.2" fill="none"/>')  # fmt: skip
        cost = "cost unknown" if d.x is None else x_format(d.x)
        svg.add(f'<circle class="point" cx="{_fmt(x)}" cy="{_fmt(cy)}" r="4.5" fill="{colour}">'
                f"<title>{escape(d.label)}: {escape(y_format(d.y))} at {escape(cost)}</title></circle>")  # fmt: skip
        svg.add("</g>")
    plot = (_LEFT, _TOP, plot_right, _TOP + plot_h)
    strip_box = (plot_right + 10, _TOP, width - _RIGHT, _TOP + plot_h)
    _labels(svg, placed, taken, plot, strip_box)
    _legend(svg, height - 10, frontier=bool(front), unknown=bool(unknown))
    return svg.render()


def _labels(svg: _Svg, placed: list[tuple[Dot, float, float, str]], taken: list[Box], plot: Box, strip: Box) -> None:
    """The points' labels, each clear of the points, bars and labels in `taken` where it can be
    (_place), with a leader line back to a point it had to move away from."""
    # The frontier's labels first: they are drawn however crowded the plot, so they take their spots before the others.
    for d, x, cy, _ in sorted(placed, key=lambda p: not p[0].on_frontier):
        # Frontier points and the unknown strip carry their whole label (target · arm); the others a
        # short one, so a crowded plot stays legible (the whole label is the point's tooltip and the table's row).
        text = d.label if d.on_frontier or d.x is None else (d.short or d.label)
        spot = _place(x, cy, text, taken, strip if d.x is None else plot, always=d.on_frontier)
        if spot is None:
            continue
        tx, ty, anchor, box = spot
        taken.append(box)
        if abs(tx - x) > 8 or abs(ty - cy) > 15:  # a label placed away from its point: a thin leader says whose
            end_x = min(max(x, box[0]), box[2])
            end_y = box[3] if cy > box[3] else box[1] if cy < box[1] else (box[1] + box[3]) / 2
            svg.add(f'<line class="leader" x1="{_fmt(x)}" y1="{_fmt(cy)}" x2="{_fmt(end_x)}" y2="{_fmt(end_y)}" '
                    f'stroke="#999" stroke-width="0.7"/>')  # fmt: skip
        svg.add(f'<text class="point-label" data-key="{escape(d.key)}" x="{_fmt(tx)}" y="{_fmt(ty)}" text-anchor="{anchor}" '
                f'font-size="10.5" fill="#333">{escape(text)}</text>')  # fmt: skip


def _legend(svg: _Svg, y: float, *, frontier: bool, unknown: bool) -> None:
    """What the colours and the dashed line mean, one row under the x axis."""
    entries = [("circle", _OFF, "a run (or group)")]
    if frontier:
        entries += [("circle", _FRONTIER, "on the Pareto frontier"), ("dash", _FRONTIER, "the frontier")]
    if unknown:
        entries.append(("circle", _UNKNOWN, "cost unknown"))
    x = float(_LEFT)
    svg.add('<g class="legend">')
    for shape, colour, text in entries:
        if shape == "circle":
            svg.add(f'<circle cx="{_fmt(x + 5)}" cy="{_fmt(y - 4)}" r="4.5" fill="{colour}"/>')
        else:
            svg.add(f'<line x1="{_fmt(x)}" x2="{_fmt(x + 18)}" y1="{_fmt(y - 4)}" y2="{_fmt(y - 4)}" stroke="{colour}" '
                    f'stroke-width="1.5" stroke-dasharray="5 3"/>')  # fmt: skip
        swatch = 24 if shape == "dash" else 14
        svg.add(f'<text x="{_fmt(x + swatch)}" y="{_fmt(y)}" font-size="11" fill="#333">{escape(text)}</text>')
        x += swatch + len(text) * 6.2 + 18
    svg.add("</g>")
