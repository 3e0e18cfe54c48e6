"""How an experiment is going, per arm, while `repro_tau2` runs it (and after).

Per arm, over its replicates:
- **simulations finished of planned**: an imported run's simulations, else what
  the runner last read from τ²'s incrementally saved results
  (ExperimentRun.simulations and .progress, written by repro/progress.py);
  planned is the plan's tasks × trials per replicate;
- **simulations started**, from Marina's own traces of the experiment's key:
  distinct conversations (seed and opening hash) among the arm's agent calls
  since the experiment started. The kit sends each run's name as
  `x-marina-session` on the agent's calls only, so the user simulator's calls
  are not counted when it shares the agent's model id (traces of an experiment
  from before that count by model id alone);
- **spend so far** (what the budget counted of the key's calls while the arm
  ran) against the budget, with its basis: an amount holding unpriced calls at
  the kit's fallback price says so (ledger.benchmarks.experiments.Spent);
- **pass^1 so far** with its 95 % normal interval over tasks (the frontier's,
  ledger/reports/frontier.py, never zero-width on few tasks), on the
  simulations evaluated so far, and how many those are;
- **infrastructure errors so far**: any one makes the run INVALID (import
  refuses it), so the page and the command line warn at the first;
- an **ETA** from the arm's pace so far: the time since τ² was started over the
  simulations saved by then (counting from the first saved simulation left the
  first batch's time out and read the pace too fast); the experiment's from the remaining
  simulations of every arm at the running arm's pace (arms run one after the other).

The experiment page, `/api/experiments/{id}/progress` and `repro_tau2`'s
progress bars all read `experiment_progress` / `as_json`."""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import Count

from kernel import money
from ledger.benchmarks.experiments import Spent, spent, unpriced_calls_by_key
from ledger.models import BenchmarkItem, Experiment, ExperimentRun, Trace
from ledger.reports.frontier import pass_k_interval

INVALID_WARNING = "this run will be INVALID; fix the cause"
BAR_WIDTH = 24


@dataclass
class ArmProgress:
    arm: str
    agent_model: str
    planned: int | None
    finished: int
    started: int  # conversations seen in Marina's traces
    evaluated: int
    passed: int
    pass1: float | None
    lo: float | None
    hi: float | None
    infra_errors: int
    spent_nanousd: int
    spent_shown: str  # on the experiment's basis ("… at the fallback price"), exact dollars
    running: bool
    eta_seconds: float | None
    outcomes: list[str]

    @property
    def share(self) -> float:
        return min(1.0, self.finished / self.planned) if self.planned else 0.0

    @property
    def percent(self) -> int:
        return round(100 * self.share)

    @property
    def eta_text(self) -> str:
        return eta_text(self.eta_seconds) if self.running else "—"

    @property
    def warning(self) -> str:
        return f"{self.infra_errors} infrastructure error(s) so far: {INVALID_WARNING}" if self.infra_errors else ""


@dataclass
class ExperimentProgress:
    experiment: Experiment
    arms: list[ArmProgress]
    eta_seconds: float | None
    spent: Spent

    @property
    def running(self) -> bool:
        return self.experiment.status == Experiment.Status.RUNNING

    @property
    def eta_text(self) -> str:
        return eta_text(self.eta_seconds)


def _seconds(start: str | None, end: str | None) -> float | None:
    try:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds() if start and end else None
    except ValueError:
        return None


def experiment_progress(experiment: Experiment) -> ExperimentProgress:
    spend = spent(experiment, unpriced_calls_by_key([experiment.key_name]).get(experiment.key_name, 0))
    planned_runs = list(experiment.runs.select_related("run").order_by("pk"))
    started, sessions = _started(experiment, planned_runs)
    imported = [p.run_id for p in planned_runs if p.run_id is not None and p.outcome == ExperimentRun.Outcome.IMPORTED]
    outcomes: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    rows = BenchmarkItem.objects.filter(run_id__in=imported, infra_error=False).order_by()
    for row in rows.values("run_id", "task_id", "correct").annotate(n=Count("id")):
        cell = outcomes[row["run_id"]][row["task_id"]]
        cell[1] += row["n"]
        cell[0] += row["n"] if row["correct"] else 0
    by_arm: dict[str, list[ExperimentRun]] = defaultdict(list)
    for p in planned_runs:
        by_arm[p.arm].append(p)
    arms: list[ArmProgress] = []
    order = {arm: i for i, arm in enumerate(experiment.arms)}
    for arm, runs in sorted(by_arm.items(), key=lambda kv: order.get(kv[0], len(order))):
        per_task: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        finished = infra = 0
        pace: float | None = None
        running = False
        for p in runs:
            progress = p.progress or {}
            if p.run is not None and p.outcome == ExperimentRun.Outcome.IMPORTED:
                finished += p.run.simulations
                infra += p.run.infra_errors
                tasks = outcomes[p.run.pk]
            else:
                finished += p.simulations
                infra += int(progress.get("infra_errors") or 0)
                tasks = {str(k): v for k, v in (progress.get("per_task") or {}).items()}
                if p.outcome == ExperimentRun.Outcome.PENDING and (p.detail == "running" or progress):
                    running = experiment.status == Experiment.Status.RUNNING
                    # From τ²'s start to the read, over what that read found saved (older progress
                    # records have no started_at: from the first saved simulation).
                    elapsed = _seconds(progress.get("started_at") or progress.get("first_at"), progress.get("updated_at"))
                    saved = int(progress.get("evaluated") or 0) + int(progress.get("infra_errors") or 0)
                    if elapsed and (saved or p.simulations):
                        pace = elapsed / (saved or p.simulations)
            for task, (ok, n) in tasks.items():
                per_task[task][0] += ok
                per_task[task][1] += n
        per_run = _planned_per_run(experiment, arm)
        planned = per_run * len(runs) if per_run else None
        value, lo, hi = pass_k_interval([v for v in per_task.values() if v[1]], 1)
        remaining = max(0, planned - finished) if planned is not None else None
        arm_spent = sum(p.spent_nanousd for p in runs)
        arms.append(ArmProgress(
            arm=arm, agent_model=runs[0].agent_model, planned=planned, finished=finished,
            started=started.get(runs[0].agent_model, 0) if not sessions else sum(started.get(s, 0) for s in sessions[arm]),
            evaluated=sum(n for _, n in per_task.values()), passed=sum(ok for ok, _ in per_task.values()),
            pass1=value, lo=lo, hi=hi, infra_errors=infra, spent_nanousd=arm_spent, spent_shown=spend.part(arm_spent),
            running=running,
            eta_seconds=remaining * pace if running and pace is not None and remaining is not None else None,
            outcomes=[p.outcome for p in runs],
        ))  # fmt: skip
    eta = None
    pace_arm = next((a for a in arms if a.running and a.eta_seconds is not None), None)
    if pace_arm is not None and all(a.planned is not None for a in arms):
        per_sim = pace_arm.eta_seconds / max(1, (pace_arm.planned or 0) - pace_arm.finished)  # type: ignore[operator]
        left = sum(max(0, (a.planned or 0) - a.finished) for a in arms if not _done(a))
        eta = per_sim * left
    return ExperimentProgress(experiment=experiment, arms=arms, eta_seconds=eta, spent=spend)


def _done(arm: ArmProgress) -> bool:
    return all(o != ExperimentRun.Outcome.PENDING for o in arm.outcomes)


def _planned_per_run(experiment: Experiment, entry: str = "") -> int | None:
    s = experiment.settings or {}
    tasks, trials = s.get("tasks"), s.get("num_trials")
    by_domain = s.get("domain_tasks") or {}
    if len(by_domain) > 1 and "/" in entry:  # a board experiment's `<domain>/<arm>`: that domain's tasks
        tasks = by_domain.get(entry.split("/", 1)[0], tasks)
    return tasks * trials if isinstance(tasks, int) and isinstance(trials, int) else None


def run_session(experiment: Experiment, arm: str, replicate: int) -> str:
    """The `x-marina-session` the kit sends on a run's agent calls (repro/plan.py: the run's name,
    `<experiment>-<arm>-r<n>`, or `<experiment>-<domain>-<arm>-r<n>` for a board's `<domain>/<arm>`)."""
    return f"{experiment.name}-{re.sub(r'[^A-Za-z0-9._-]', '_', arm.replace('/', '-', 1))}-r{replicate}"


def _started(experiment: Experiment, planned: list[ExperimentRun]) -> tuple[dict[str, int], dict[str, list[str]]]:
    """Conversations (seed, opening) among the experiment key's traces (the started_at index bounds the
    scan): per run session when the agent's calls carry one (then also each arm's sessions), else per
    requested model."""
    if not experiment.key_name:
        return {}, {}
    traces = Trace.objects.filter(key_name=experiment.key_name, started_at__gte=experiment.started_at).exclude(conv_opening="")
    if experiment.ended_at:
        traces = traces.filter(started_at__lte=experiment.ended_at)
    sessions: dict[str, list[str]] = defaultdict(list)
    for p in planned:
        sessions[p.arm].append(run_session(experiment, p.arm, p.replicate))
    wanted = [s for names in sessions.values() for s in names]
    by_session = traces.filter(session__in=wanted)
    column = "session" if by_session.exists() else "requested_model"
    rows = (by_session if column == "session" else traces).order_by().values(column, "conv_seed", "conv_opening").distinct()
    counts: dict[str, int] = defaultdict(int)
    for row in rows:
        counts[row[column]] += 1
    return dict(counts), (dict(sessions) if column == "session" else {})


def eta_text(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{max(minutes, 1)} min"


def bar(arm: ArmProgress, budget_nanousd: int | None) -> str:
    """One arm as a line of text: the command line's progress bar."""
    filled = round(BAR_WIDTH * arm.share)
    shown = f"{arm.finished}/{arm.planned if arm.planned is not None else '?'}"
    value = "—" if arm.pass1 is None else f"{arm.pass1:.3f} [{arm.lo:.3f}, {arm.hi:.3f}] on {arm.evaluated} simulation(s)"
    line = (f"{arm.arm:<14} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {shown} simulations · "
            f"spent {arm.spent_shown} of {money.dollars(budget_nanousd)} · pass^1 {value} · "
            f"infra errors {arm.infra_errors} · ETA {eta_text(arm.eta_seconds)}")  # fmt: skip
    if arm.infra_errors:
        line += f" · WARNING: {INVALID_WARNING}"
    return line


def as_json(p: ExperimentProgress) -> dict[str, Any]:
    e = p.experiment
    return {
        "experiment": e.name,
        "status": e.status,
        **p.spent.as_json(),  # spent_usd with spent_basis (priced | fallback price | lower bound | unknown)
        "budget_usd": None if e.budget_nanousd is None else money.plain(e.budget_nanousd),
        "eta_seconds": p.eta_seconds,
        "as_of": datetime.now(UTC).isoformat(),
        "arms": [
            {
                "arm": a.arm,
                "agent_model": a.agent_model,
                "planned": a.planned,
                "finished": a.finished,
                "started_in_traces": a.started,
                "evaluated": a.evaluated,
                "passed": a.passed,
                "pass_hat_1": a.pass1,
                "interval": None if a.lo is None else [a.lo, a.hi],
                "interval_simulations": a.evaluated,
                "infra_errors": a.infra_errors,
                "warning": a.warning,
                "spent_usd": money.plain(a.spent_nanousd),
                "spent_basis": p.spent.basis,
                "running": a.running,
                "eta_seconds": a.eta_seconds,
            }
            for a in p.arms
        ],
    }
