"""The stopping rule's state for one experiment: per arm, the anytime-valid
interval (ledger.benchmarks.sequential) for its pass^1 difference from the
baseline over the replicates both have imported, and whether that decides it.
`repro_tau2 --stop-when-decided` asks after every replicate; the experiment
page shows the same state.

Each replicate pairs the arm's run with the baseline's run of the same
replicate (the same seed, so the same trial seeds): an item of the arm is paired
with the baseline's item of the same task and trial seed (by trial number when
the runs recorded none), and the paired differences enter the confidence
sequence replicate by replicate, task by task (numeric ids in numeric order),
trial by trial: an order fixed before any outcome is seen."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from ledger.benchmarks import experiments
from ledger.benchmarks.sequential import ConfidenceSequence, Decision, decide
from ledger.models import BenchmarkItem, Experiment


@dataclass(frozen=True)
class ArmState:
    arm: str
    baseline: str
    replicates: int  # replicates in the interval: both sides imported
    decision: Decision | None  # None before the first such replicate

    @property
    def decided(self) -> bool:
        return self.decision is not None and self.decision.decided


@dataclass(frozen=True)
class StopState:
    arms: list[ArmState]
    detect: float | None
    alpha: float

    @property
    def decided(self) -> bool:
        """Every arm is decided (an experiment of one arm never is: nothing is compared)."""
        return bool(self.arms) and all(a.decided for a in self.arms)

    @property
    def level(self) -> str:
        return f"{1 - self.alpha:.0%}"

    @property
    def reason(self) -> str:
        return "; ".join(f"{a.arm}: {a.decision.reason}" for a in self.arms if a.decision is not None)


def state(experiment: Experiment, *, detect: float | None = None, alpha: float | None = None) -> StopState:
    """The rule's state on the experiment's imported runs (detect and alpha default to its settings')."""
    settings = experiment.settings if isinstance(experiment.settings, dict) else {}
    detect = settings.get("detect") if detect is None else detect
    alpha = float(settings.get("alpha") or 0.05) if alpha is None else alpha
    table = experiments.arm_table(experiment)
    if len(table) < 2:
        return StopState([], detect, alpha)
    base = table[0]
    base_runs = _imported_by_replicate(base)
    arms = []
    for row in table[1:]:
        runs = _imported_by_replicate(row)
        common = sorted(base_runs.keys() & runs.keys())
        sequence = ConfidenceSequence(alpha)
        for replicate in common:
            sequence.extend(paired_differences(base_runs[replicate], runs[replicate]))
        decision = decide(sequence.interval(), detect) if common else None
        arms.append(ArmState(row.arm, base.arm, len(common), decision))
    return StopState(arms, detect, alpha)


def _imported_by_replicate(row: experiments.ArmRow) -> dict[int, int]:
    return {
        planned.replicate: planned.run.pk
        for planned in row.runs
        if planned.run is not None and planned.outcome == experiments.Outcome.IMPORTED
    }


def paired_differences(run_a: int, run_b: int) -> list[int]:
    """B − A per paired item of two runs (infrastructure errors left out), in
    (task, trial) order: by task and trial seed, else by task and trial number."""
    def outcomes(run_id: int) -> list[tuple[str, Any, int, bool]]:
        rows = BenchmarkItem.objects.filter(run_id=run_id, infra_error=False)
        return list(rows.values_list("task_id", "seed", "trial", "correct"))

    a, b = outcomes(run_a), outcomes(run_b)
    keyed_a = {(t, s): (n, ok) for t, s, n, ok in a if s is not None}
    keyed_b = {(t, s): (n, ok) for t, s, n, ok in b if s is not None}
    if not keyed_a.keys() & keyed_b.keys():
        keyed_a = {(t, n): (n, ok) for t, _, n, ok in a}
        keyed_b = {(t, n): (n, ok) for t, _, n, ok in b}
    by_task: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for key in keyed_a.keys() & keyed_b.keys():
        trial, ok_a = keyed_a[key]
        by_task[key[0]].append((trial, int(keyed_b[key][1]) - int(ok_a)))
    return [d for task in sorted(by_task, key=_natural) for _, d in sorted(by_task[task])]


def _natural(task_id: str) -> tuple[int, int, str]:
    return (0, int(task_id), "") if task_id.isdigit() else (1, 0, task_id)


@dataclass(frozen=True)
class PlanProgress:
    """How far an experiment with a power plan (--detect) has come towards it."""

    plan: dict[str, Any]  # repro.power.PowerPlan.as_settings()
    replicates_done: int  # replicates every arm has imported
    trials_done: int  # per task, per arm

    @property
    def percent(self) -> int:
        needed = int(self.plan.get("trials_needed") or 0)
        return 100 if not needed else min(100, round(100 * self.trials_done / needed))


def plan_progress(experiment: Experiment) -> PlanProgress | None:
    settings = experiment.settings if isinstance(experiment.settings, dict) else {}
    plan = settings.get("power_plan")
    if not isinstance(plan, dict):
        return None
    table = experiments.arm_table(experiment)
    done = min((len(_imported_by_replicate(row)) for row in table), default=0)
    return PlanProgress(plan, done, done * int(settings.get("num_trials") or 0))
