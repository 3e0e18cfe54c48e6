"""How the pages write figures for a person (ledger/templatetags/ledger_format.py): one money
format with the exact figure on hover, ids that wrap only after separators, JSON fields as
lists, durations and shares as people read them; the compare page's verdict and the
frontier's labels."""
from __future__ import annotations

import re
from decimal import Decimal
from types import SimpleNamespace

import pytest

from kernel import money
from ledger.benchmarks import experiments
from ledger.benchmarks.board import Verdict
from ledger.benchmarks.cli import import_lines
from ledger.benchmarks.importers import ImportResult
from ledger.reports.scatter import Dot, scatter_chart
from ledger.reports.selectors import compare_verdict
from ledger.templatetags.ledger_format import (
    breakable,
    cost_of,
    duration,
    money_html,
    percent,
    readable_list,
    signed_money,
)
from tests.ledger.builders import make_run


@pytest.mark.parametrize(
    ("amount", "text"),
    [(0, "$0.00"), (7_250_000, "$0.0073"), (800_000_000, "$0.8000"), (1_234_567_890_123, "$1,234.57"),
     (40_000, "<$0.0001"), (-7_250_000, "-$0.0073"), (Decimal("86.89158050"), "$86.89"), (None, "—")],
)  # fmt: skip
def test_short_is_cents_or_four_places_under_a_dollar(amount: money.Amount, text: str) -> None:
    assert money.short(amount) == text


def test_money_html_shows_cents_and_keeps_the_exact_figure_in_its_title() -> None:
    assert money_html(181_430_250) == '<span class="money" title="$0.18143025 exactly">$0.1814</span>'
    assert signed_money(Decimal("0.0232")) == '<span class="money" title="+$0.02320000 exactly">+$0.0232</span>'
    # Unpriced: "—" and why, never $0.
    unpriced = money_html(None, "unpriced")
    assert unpriced.startswith('<span class="money unknown" title="unpriced">—') and "$" not in unpriced


def test_a_runs_cost_says_what_was_unpriced() -> None:
    assert cost_of(SimpleNamespace(cost_nanousd=None, unpriced_calls=40)).count("unpriced (40 calls)") == 2  # text and title
    partial = cost_of(SimpleNamespace(cost_nanousd=1_230_000_000, unpriced_calls=2))
    assert partial.startswith("≥ ") and ">$1.23</span> (2 unpriced)" in partial
    assert ">$1.23</span>" in cost_of(SimpleNamespace(cost_nanousd=1_230_000_000, unpriced_calls=0))


def test_no_eight_decimal_amount_outside_a_title() -> None:
    for amount in (1, 181_430_250, 86_891_580_500, 3_210_000_000):
        shown = re.sub(r'title="[^"]*"', "", money_html(amount))
        assert not re.search(r"\d\.\d{5,}", shown), shown


def test_a_long_id_wraps_only_after_its_separators_and_stays_escaped() -> None:
    assert breakable("marina/verify:demo/alpha-large") == (
        '<span class="breakable">marina/<wbr>verify:<wbr>demo/<wbr>alpha-<wbr>large</span>'
    )
    assert breakable("<b>x</b>") == '<span class="breakable">&lt;b&gt;x&lt;/<wbr>b&gt;</span>'
    assert breakable(None) == "—"


def test_json_fields_read_as_lists() -> None:
    detail = readable_list({"proposer": "demo/alpha-large", "max_rounds": 1, "held_write": False})
    assert detail == (
        '<ul class="readable"><li><b>proposer</b>: demo/alpha-large</li><li><b>max rounds</b>: 1</li>'
        "<li><b>held write</b>: no</li></ul>"
    )
    reasons = readable_list(["The agent's reasoning effort is not set.", "No task split."])
    assert reasons == '<ul class="readable"><li>The agent&#x27;s reasoning effort is not set.</li><li>No task split.</li></ul>'
    assert "none" in readable_list({}) and "[" not in reasons and "{" not in detail


@pytest.mark.parametrize(("ms", "text"), [(None, "—"), (4.5, "4.5 ms"), (840.4, "840 ms"), (5974.7, "5.97 s"), (61_234.0, "61.23 s")])
def test_durations_in_seconds_from_a_second_up(ms: float | None, text: str) -> None:
    assert duration(ms) == text


@pytest.mark.parametrize(("share", "text"), [(0.0, "0 %"), (1 / 201, "<1 %"), (0.004, "<1 %"), (0.1, "10 %"), (200 / 201, "100 %")])
def test_a_share_that_is_not_nothing_never_reads_zero(share: float, text: str) -> None:
    assert percent(share) == text


def test_the_compare_verdict_is_one_line_the_interval_decides() -> None:
    def verdict(diff: float, lo: float, hi: float, p: float, said: str = "") -> tuple[str, str]:
        return compare_verdict(SimpleNamespace(diff_pass1=diff, diff_ci=(lo, hi), mcnemar_p=p, verdict=said))

    assert verdict(0.1, -0.03, 0.23, 0.22) == (
        "B − A = +10.0 pts pass^1, 95 % CI [−3, +23], McNemar p = 0.22: not significant (the interval includes 0)", "none"
    )
    said = "no difference larger than 25.0 points (the smallest these runs detect at 80% power)"
    assert verdict(0.1, -0.03, 0.23, 0.22, said)[0].endswith(f"McNemar p = 0.22: not significant ({said})")
    assert verdict(0.125, 0.025, 0.25, 0.0625)[0].endswith("McNemar p = 0.06: B is better (the interval is above 0)")
    assert verdict(-0.2, -0.3, -0.1, 0.004) == (
        "B − A = −20.0 pts pass^1, 95 % CI [−30, −10], McNemar p = 0.004: A is better (the interval is below 0)", "a"
    )


def _label_boxes(svg: str) -> list[tuple[float, float, float, float]]:
    """Each point label's box as drawn (the chart's own estimate of a 10.5 px glyph: 6 px)."""
    boxes = []
    for x, y, anchor, text in re.findall(r'<text class="point-label" data-key="[^"]*" x="([\d.-]+)" y="([\d.-]+)" text-anchor="(\w+)"[^>]*>([^<]*)<', svg):
        width = len(text.replace("&amp;", "&").replace("&#x27;", "'")) * 6.0
        left = float(x) - (width if anchor == "end" else width / 2 if anchor == "middle" else 0)
        boxes.append((left, float(y) - 10, left + width, float(y) + 2))
    return boxes


def _overlap(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return min(a[2], b[2]) > max(a[0], b[0]) and min(a[3], b[3]) > max(a[1], b[1])


def test_frontier_labels_keep_clear_of_each_other_and_of_the_bars() -> None:
    """Seven points crowded near one cost, as the demo's verify runs are, and one unknown."""
    dots = [
        Dot(f"run:{n}", f"marina/verify:demo/alpha-large · arm-{n}", 0.0329 + 0.0004 * (n % 3), 0.70 + 0.02 * n,
            0.60 + 0.02 * n, 0.85 + 0.02 * n, on_frontier=n in (0, 6), short=f"#{n}")
        for n in range(7)
    ] + [Dot("run:9", "demo/gamma-local · demo:airline-local", None, 0.675, 0.51, 0.84)]  # fmt: skip
    svg = scatter_chart(dots, title="t", x_title="x", y_title="y", x_format=lambda v: f"${v:.2f}")
    boxes = _label_boxes(svg)
    assert len(boxes) == len(dots)
    assert not [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1 :] if _overlap(a, b)]
    bars = [(float(x) - 4, min(float(a), float(b)), float(x) + 4, max(float(a), float(b)))
            for x, a, b in re.findall(r'class="interval" d="M([\d.]+),([\d.]+)V([\d.]+)', svg)]  # fmt: skip
    assert len(bars) == len(dots)
    assert not [(box, bar) for box in boxes for bar in bars if _overlap(box, bar)]
    # A label pushed away from its crowded point keeps a leader line back to it.
    points = {(round(float(x), 1), round(float(y), 1)) for x, y in re.findall(r'<circle class="point" cx="([\d.]+)" cy="([\d.]+)"', svg)}
    leaders = re.findall(r'<line class="leader" x1="([\d.]+)" y1="([\d.]+)"', svg)
    assert leaders and all((round(float(x), 1), round(float(y), 1)) in points for x, y in leaders)
    # The whole unknown label shows inside the strip, and a legend says what the colours mean.
    assert ">demo/gamma-local · demo:airline-local<" in svg
    assert all(label in svg for label in ("a run (or group)", "on the Pareto frontier", "cost unknown"))


def test_an_unpriced_runs_source_has_one_word_on_the_page_and_in_the_command(user_client) -> None:
    run = make_run({"1#0": 1.0}, cost_nanousd=None, cost_source="none", unpriced_calls=3)
    html = user_client.get(f"/reports/runs/{run.pk}/").content.decode()
    assert "source: unpriced" in html and "source: unknown" not in html and "— <span class=\"why\">unpriced (3 calls)</span>" in html
    verdict = Verdict(True, [], "base")
    result = ImportResult(run, True, False, "results.json", 1, None, verdict, "3 calls unpriced", [], None)  # type: ignore[arg-type]
    assert "(source unpriced: 3 calls unpriced)" in "\n".join(import_lines(result))


def test_the_power_plans_estimate_is_in_cents(user_client) -> None:
    plan = {"detect": 0.1, "power": 0.8, "alpha": 0.05, "trials_needed": 16, "tasks": 50, "replicates_needed": 4,
            "simulations": 1600, "cost_nanousd": 86_891_580_500, "noise": "the ledger", "detects_as_given": 0.2}  # fmt: skip
    experiment = experiments.open_experiment(
        name="planned", domain="airline", arms=["single", "verify"], key_name="repro-planned", budget_nanousd=None,
        estimate_nanousd=None, settings={"num_trials": 4, "power_plan": plan},
        runs=[experiments.PlannedRun(arm, 1, "m", f"g-{arm}") for arm in ("single", "verify")],
    )  # fmt: skip
    html = user_client.get(f"/reports/experiments/{experiment.pk}/").content.decode()
    plan_text = html.split('id="power-plan"')[1].split("</p>")[0]
    assert 'title="$86.89158050 exactly">$86.89</span>' in plan_text
