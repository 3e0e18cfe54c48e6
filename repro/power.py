"""The power plan `repro_tau2 --detect D` prints: how many trials per task the
paired design needs to see a pass^1 difference D (each arm against the
baseline, the same tasks and trial seeds), how many simulations and dollars
that is at the plan's estimate, what the plan as given and the budget can
detect, and what --stop-when-decided's interval is expected to need. The
statistics are ledger.benchmarks.power's and .sequential's; the noise is the
ledger's (ledger.benchmarks.noise)."""
from __future__ import annotations

from math import ceil

from kernel import money
from ledger.benchmarks import noise, power, sequential
from repro.plan import Plan, PowerPlan

MAX_REPLICATES = 1000  # past this a plan is not a plan


def plan_power(plan: Plan, detect: float, *, alpha: float = power.ALPHA, level: float = power.POWER) -> PowerPlan:
    """The power plan for `plan` (ValueError when it cannot be made: unknown task count, bad levels)."""
    power.check_levels(alpha, level)
    if plan.tasks is None:
        raise ValueError("--detect needs the number of tasks: give --num-tasks or --task-ids for this split")
    o = plan.options
    found = noise.from_ledger(domain=o.domain, task_split=o.split)
    trials = power.trials_needed(detect, found.variance, plan.tasks, alpha=alpha, power=level)
    replicates = ceil(trials / o.num_trials)
    per_replicate = plan.tasks * o.num_trials  # simulations per arm and replicate
    per_sim = [e.per_simulation_nanousd for e in plan.estimates]
    replicate_cost = None if any(c is None for c in per_sim) else sum(c or 0 for c in per_sim) * per_replicate
    budget_replicates = None if not replicate_cost else plan.budget_nanousd // replicate_cost
    return PowerPlan(
        detect=detect, alpha=alpha, power=level, tasks=plan.tasks, trials_per_replicate=o.num_trials,
        arms=len(plan.arms), noise=found, trials_needed=trials, replicates_needed=replicates,
        simulations=len(plan.arms) * per_replicate * replicates,
        cost_nanousd=None if replicate_cost is None else replicate_cost * replicates,
        detects_as_given=power.detectable(found.variance, plan.tasks, o.num_trials * o.replicates, alpha=alpha, power=level),
        budget_replicates=budget_replicates,
        detects_at_budget=None if not budget_replicates else power.detectable(
            found.variance, plan.tasks, o.num_trials * budget_replicates, alpha=alpha, power=level),
        sequential_replicates=_sequential(detect, found.variance, per_replicate, alpha),
    )  # fmt: skip


def _sequential(detect: float, variance: float, items_per_replicate: int, alpha: float) -> int | None:
    """Replicates until the stopping rule's interval is expected narrower than `detect`."""
    for r in range(1, MAX_REPLICATES + 1):
        if sequential.expected_width(r * items_per_replicate, variance, alpha) < detect:
            return r
    return None


def _pts(x: float) -> str:
    return f"{100 * x:.1f} points"


def render(p: PowerPlan, plan: Plan) -> list[str]:
    """The power plan's lines, printed after the plan."""
    cost = "unknown (an arm's estimate is unknown)" if p.cost_nanousd is None else money.dollars(p.cost_nanousd)
    o = plan.options
    lines = [
        f"  power plan: to detect a pass^1 difference of {_pts(p.detect)} (each arm against the baseline, paired: "
        f"same tasks, same trial seeds) with {p.power:.0%} power at alpha {p.alpha:g}:",
        f"    {p.trials_needed} trial(s) per task on {p.tasks} task(s) = {p.replicates_needed} replicate(s) of "
        f"{p.trials_per_replicate} trial(s); {p.simulations} simulation(s) over {p.arms} arm(s); estimated {cost}",
        f"    noise: {p.noise.described}",
        f"    this plan ({o.num_trials} trial(s) × {o.replicates} replicate(s)) detects {_pts(p.detects_as_given)}",
    ]
    if p.budget_replicates is not None and not p.affordable:
        if p.budget_replicates and p.detects_at_budget is not None:
            lines.append(
                f"    the budget {money.dollars(plan.budget_nanousd)} pays {p.budget_replicates} replicate(s), not "
                f"{p.replicates_needed}: it can detect {_pts(p.detects_at_budget)}, not {_pts(p.detect)}"
            )
        else:
            lines.append(f"    the budget {money.dollars(plan.budget_nanousd)} does not pay one replicate of every arm")
    if p.sequential_replicates is None:
        lines.append(f"    with --stop-when-decided: its anytime interval is not expected narrower than {_pts(p.detect)} "
                     f"within {MAX_REPLICATES} replicates; it stops only once the interval excludes 0")  # fmt: skip
    else:
        lines.append(
            f"    with --stop-when-decided: the anytime interval (valid however often it is looked at) is expected "
            f"narrower than {_pts(p.detect)} after {p.sequential_replicates} replicate(s); it stops sooner once it excludes 0"
        )
    return lines
