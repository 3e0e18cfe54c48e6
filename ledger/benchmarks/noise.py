"""The team's own noise, for a power plan: the within-task variance of one
paired difference (B − A on the same task and trial seed), from earlier
comparable runs in the ledger, or a stated conservative prior without them.

- **Comparable** runs match the plan on every field of COMPARABLE (the
  benchmark's domain, the task split; a run setting that changes what a task
  asks joins the tuple) and are valid; the newest HISTORY_RUNS are read.
- **Paired history** first: two comparable runs of different targets with the
  same seed ran the same tasks with the same trial seeds, as the kit's arms do.
  Per task, the sample variance of their paired differences (items paired by
  task and trial seed, else trial number) estimates δ − (p_B − p_A)², δ the
  discordance; averaged over tasks and pairs (ledger.benchmarks.power).
- **Single runs** otherwise: per run and task the unbiased p(1 − p) of the
  outcomes, doubled (two arms, taken as independent within a task: no credit
  for the positive correlation the shared seeds give, so it errs high).
- **The prior** (power.PRIOR_VARIANCE) when no comparable run has a task with
  two evaluated trials."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from ledger.benchmarks import power
from ledger.models import BenchmarkItem, BenchmarkRun

COMPARABLE = ("domain", "task_split")  # run fields a plan's history must match exactly
HISTORY_RUNS = 20  # the newest comparable runs read
MAX_PAIRS = 20


@dataclass(frozen=True)
class Noise:
    variance: float  # of one paired difference within a task
    source: str  # paired runs | single runs | prior
    run_ids: list[int] = field(default_factory=list)
    tasks: int = 0  # (pair or run, task) cells averaged over
    note: str = ""

    @property
    def described(self) -> str:
        if self.source == "prior":
            return self.note
        runs = ", ".join(f"#{i}" for i in self.run_ids)
        return f"{self.note}: variance {self.variance:.3f} per paired trial, from run(s) {runs}"


def comparable_runs(**settings: Any) -> list[BenchmarkRun]:
    """The newest valid runs that match `settings` on every COMPARABLE field."""
    missing = [f for f in COMPARABLE if f not in settings]
    if missing:
        raise ValueError(f"comparable runs need {', '.join(missing)}")
    match = {f: settings[f] for f in COMPARABLE}
    return list(BenchmarkRun.objects.filter(status="complete", **match).order_by("-created_at", "-pk")[:HISTORY_RUNS])


def from_ledger(**settings: Any) -> Noise:
    """The noise of runs comparable to `settings` (COMPARABLE's fields), else the prior."""
    runs = comparable_runs(**settings)
    outcomes = _outcomes([r.pk for r in runs])
    pairs = [
        (a, b) for a, b in combinations(sorted(runs, key=lambda r: r.pk), 2)
        if a.seed is not None and a.seed == b.seed and a.target != b.target
    ][:MAX_PAIRS]  # fmt: skip
    diffs = [d for a, b in pairs for d in _paired_diffs(outcomes[a.pk], outcomes[b.pk])]
    paired = power.paired_variance(diffs)
    if paired is not None:
        used = sorted({r.pk for pair in pairs for r in pair})
        return Noise(paired[0], "paired runs", used, paired[1],
                     f"{len(pairs)} earlier pair(s) of arms run with the same seeds")  # fmt: skip
    cells = [(sum(ok), len(ok)) for run in outcomes.values() for ok in _by_task(run).values()]
    single = power.outcome_variance(cells)
    if single is not None:
        used = sorted(pk for pk in outcomes if any(len(v) >= 2 for v in _by_task(outcomes[pk]).values()))
        return Noise(2 * single[0], "single runs", used, single[1],
                     "earlier single runs, two arms taken as independent within a task")  # fmt: skip
    return Noise(power.PRIOR_VARIANCE, "prior", [], 0, power.PRIOR_NOTE)


_Outcome = tuple[str, Any, int, bool]  # task, trial key (seed or trial number), trial number, success


def _outcomes(run_ids: Sequence[int]) -> dict[int, list[_Outcome]]:
    out: dict[int, list[_Outcome]] = {pk: [] for pk in run_ids}
    rows = BenchmarkItem.objects.filter(run_id__in=run_ids, infra_error=False).values_list(
        "run_id", "task_id", "seed", "trial", "correct"
    )
    for run_id, task_id, seed, trial, correct in rows.iterator():
        out[run_id].append((task_id, seed, trial, bool(correct)))
    return out


def _by_task(outcomes: list[_Outcome]) -> dict[str, list[bool]]:
    tasks: dict[str, list[bool]] = defaultdict(list)
    for task, _, _, ok in outcomes:
        tasks[task].append(ok)
    return tasks


def _paired_diffs(a: list[_Outcome], b: list[_Outcome]) -> list[list[int]]:
    """Per task, B − A over the trials both runs have: paired by trial seed when
    they share any, else by trial number (compare's rule)."""
    by_seed_a = {(t, s): ok for t, s, _, ok in a if s is not None}
    by_seed_b = {(t, s): ok for t, s, _, ok in b if s is not None}
    common = by_seed_a.keys() & by_seed_b.keys()
    if not common:
        by_seed_a = {(t, n): ok for t, _, n, ok in a}
        by_seed_b = {(t, n): ok for t, _, n, ok in b}
        common = by_seed_a.keys() & by_seed_b.keys()
    tasks: dict[str, list[int]] = defaultdict(list)
    for key in sorted(common, key=str):
        tasks[key[0]].append(int(by_seed_b[key]) - int(by_seed_a[key]))
    return list(tasks.values())
