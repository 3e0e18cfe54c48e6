"""The power plan `repro_tau2 --detect D` prints: how many trials per task the
paired design needs to see a pass^1 difference D (each arm against the
baseline, the same tasks and trial seeds), how many simulations and dollars
that is at the plan's estimate, what the plan as given and the budget can
detect, and what --stop-when-decided's interval is expected to need. The
statistics are ledger.benchmarks.power's and .sequential's; the noise is the
ledger's (ledger.benchmarks.noise)."""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil
from typing import Any

from kernel import money
from ledger.benchmarks import noise, power, sequential
from repro.plan import Plan

MAX_REPLICATES = 1000  # past this a plan is not a plan


@dataclass(frozen=True)
class PowerPlan:
    detect: float
    alpha: float
    power: float
    tasks: int
    trials_per_replicate: int
    arms: int
    noise: noise.Noise
    trials_needed: int  # per task, per arm
    replicates_needed: int  # of --num-trials each
    simulations: int  # every arm, at replicates_needed
    cost_nanousd: int | None  # at the plan's estimate; None when an arm's is unknown
    detects_as_given: float  # what --num-trials × --replicates detects
    budget_replicates: int | None  # replicates the budget pays (None: the cost is unknown)
    detects_at_budget: float | None
    sequential_replicates: int | None  # until the anytime interval is expected narrower than detect

    @property
    def affordable(self) -> bool:
        return self.budget_replicates is None or self.budget_replicates >= self.replicates_needed

    def as_settings(self) -> dict[str, Any]:
        """What the experiment keeps of it (its page shows the plan and the progress towards it)."""
        return {
            "detect": self.detect, "alpha": self.alpha, "power": self.power, "tasks": self.tasks,
            "trials_needed": self.trials_needed, "replicates_needed": self.replicates_needed,
            "simulations": self.simulations, "cost_nanousd": self.cost_nanousd,
            "detects_as_given": self.detects_as_given, "detects_at_budget": self.detects_at_budget,
            "sequential_replicates": self.sequential_replicates, "variance": self.noise.variance,
            "noise_source": self.noise.source, "noise_runs": self.noise.run_ids, "noise": self.noise.described,
        }  # fmt: skip


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
