"""A comparison as JSON-ready data: what `manage.py compare --json` prints and
GET /api/compare returns (marina/read_api.py). The figures are
ledger.benchmarks.compare's `Comparison`; this module only names the fields.
Money is a decimal string of dollars; every difference is B − A (`sign`).
docs/comparisons.md says what every field means.
"""
from __future__ import annotations

from typing import Any

from kernel import money
from ledger.benchmarks.compare import SIGN, Comparison, Side


def as_json(c: Comparison) -> dict[str, Any]:
    """The comparison as JSON-ready data (money as a decimal string)."""

    def side(s: Side) -> dict[str, Any]:
        return {
            "run_ids": s.run_ids,
            "label": s.label,
            "items": s.items,
            "mean_reward": s.mean_reward,
            "pass_hat_k": s.pass_hat_k,
            "pass1_ci": list(s.pass1_ci),
            "cost_per_item_usd": money.plain(s.cost_per_item_usd) or None,
            "unpriced_calls": s.unpriced_calls,
        }

    replicates = None
    if c.replicates is not None:
        r = c.replicates
        replicates = {
            "a_runs": r.a_runs, "b_runs": r.b_runs, "a_pass1": r.a_pass1, "b_pass1": r.b_pass1,
            "a_sd": r.a_sd, "b_sd": r.b_sd, "a_agree": r.a_agree, "b_agree": r.b_agree,
            "diff": r.diff, "bootstrap_p": r.bootstrap_p,
            "mcnemar_p_range": [r.mcnemar_min, r.mcnemar_max], "pairs": r.pairs,
        }  # fmt: skip
    return {
        "sign": SIGN,
        "a": side(c.a),
        "b": side(c.b),
        "shared_items": c.shared_items,
        "shared_tasks": c.shared_tasks,
        "warnings": c.warnings,
        "a_only": c.a_only,
        "b_only": c.b_only,
        "mcnemar_p": c.mcnemar_p,
        "diff_pass1": c.diff_pass1,
        "diff_ci": list(c.diff_ci),
        "bootstrap": c.bootstrap,
        "smallest_detectable": c.smallest_detectable,
        "verdict": c.verdict,
        "tasks": [
            {
                "task_id": t.task_id,
                "a_successes": t.a_successes,
                "a_trials": t.a_trials,
                "b_successes": t.b_successes,
                "b_trials": t.b_trials,
                "diff": t.diff,
            }
            for t in c.tasks
        ],
        "replicates": replicates,
        "decisions": [
            {"side": r.side, "decision": r.decision, "items": r.items, "successes": r.successes,
             "other_successes": r.other_successes, "diff": r.diff}
            for r in c.decisions
        ],  # fmt: skip
    }
