"""A comparison as the lines `manage.py compare` prints, and the kit's
report (repro/runner.py) quotes. The figures are ledger.benchmarks.compare's
`Comparison`; this module only lays them out (percentages, p-values, $/item
with unpriced calls said, the per-task table). docs/comparisons.md says what
every line means; ledger.reports.compare_json gives the same figures as JSON.
"""
from __future__ import annotations

from collections.abc import Sequence

from kernel import money
from ledger.benchmarks.compare import Comparison, Replicates, Side, TaskDiff


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _signed_pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def _money(side: Side) -> str:
    """$/item, "≥ $x/item (n unpriced)" or "unpriced (n calls)": unknown is never $0."""
    return money.with_unpriced(side.cost_per_item_usd, side.unpriced_calls, per="/item")


def _p(p: float) -> str:
    return f"{p:.4f}" if p >= 0.0001 else f"{p:.2e}"


def render_text(c: Comparison, *, tasks: bool = False) -> str:
    """The lines `manage.py compare` prints."""
    lines = [
        f"Compare B against A on {c.shared_items} shared item(s) in {c.shared_tasks} task(s); "
        "every difference is B - A"
    ]
    lines += [f"warning: {w}" for w in c.warnings]
    for name, side in (("A", c.a), ("B", c.b)):
        runs = ", ".join(f"#{i}" for i in side.run_ids)
        reward = "n/a" if side.mean_reward is None else f"{side.mean_reward:.3f}"
        curve = "  ".join(f"pass^{k} {v:.3f}" for k, v in enumerate(side.pass_hat_k, start=1))
        lo, hi = side.pass1_ci
        lines.append(f"{name}  {side.label} (run {runs}): {side.items} item(s)")
        lines.append(f"   mean reward {reward}  {curve}")
        lines.append(f"   pass^1 95% Wilson [{_pct(lo)}, {_pct(hi)}]  {_money(side)}")
    lines.append(
        f"discordant: A right / B wrong {c.a_only}   A wrong / B right {c.b_only}   "
        f"exact McNemar p={_p(c.mcnemar_p)}"
    )
    lo, hi = c.diff_ci
    lines.append(f"pass^1 B - A {_signed_pct(c.diff_pass1)}  95% [{_signed_pct(lo)}, {_signed_pct(hi)}]")
    lines.append(f"   bootstrap: {c.bootstrap}")
    mde = "n/a" if c.smallest_detectable is None else f"{100 * c.smallest_detectable:.1f} points"
    lines.append(f"   smallest detectable difference (80% power, alpha 0.05): {mde}; {c.verdict}")
    if c.a.cost_per_item_usd is not None and c.b.cost_per_item_usd is not None and not (c.a.unpriced_calls or c.b.unpriced_calls):
        lines.append(f"$/item B - A {c.b.cost_per_item_usd - c.a.cost_per_item_usd:+.8f}")
    if c.replicates is not None:
        lines += _replicate_lines(c.replicates)
    if c.decisions:
        lines.append("by formation decision (each side's shared items, by what its formation decided on their calls):")
        for row in c.decisions:
            paired = "" if row.diff is None else f"  other side on these items {_pct(row.rate - row.diff if row.side == 'B' else row.rate + row.diff)}  B - A {_signed_pct(row.diff)}"
            lines.append(f"   {row.side} {row.decision}: {row.items} item(s), pass {_pct(row.rate)}{paired}")
    if tasks:
        lines += _task_table(c.tasks)
    return "\n".join(lines) + "\n"


def _replicate_lines(r: Replicates) -> list[str]:
    def sd(x: float | None) -> str:
        return "n/a (one run)" if x is None else f"{x:.4f}"

    out = ["replicates:"]
    for name, runs, values, spread, agree in (
        ("A", r.a_runs, r.a_pass1, r.a_sd, r.a_agree), ("B", r.b_runs, r.b_pass1, r.b_sd, r.b_agree)
    ):
        per_run = ", ".join(f"{v:.3f}" for v in values)
        out.append(
            f"   {name} {runs} run(s): pass^1 per run {per_run}; between-run SD {sd(spread)}; "
            f"all runs agree on {_pct(agree)} of tasks"
        )
    out.append(f"   pooled pass^1 B - A {_signed_pct(r.diff)}  bootstrap p={_p(r.bootstrap_p)}")
    out.append(f"   exact McNemar p per replicate pair: {_p(r.mcnemar_min)} .. {_p(r.mcnemar_max)} ({r.pairs} pair(s))")
    if min(r.a_runs, r.b_runs) < 2:
        out.append("   not replicated: a side has one run, so run-to-run variation is unknown")
    return out


def _task_table(rows: Sequence[TaskDiff]) -> list[str]:
    width = max([len("task")] + [len(t.task_id) for t in rows])
    out = ["", f"{'task':<{width}}  {'A':>7}  {'B':>7}  {'B - A':>7}"]
    for t in rows:
        out.append(
            f"{t.task_id:<{width}}  {f'{t.a_successes}/{t.a_trials}':>7}  "
            f"{f'{t.b_successes}/{t.b_trials}':>7}  {_signed_pct(t.diff):>7}"
        )
    return out
