"""Experiments: the record `manage.py repro_tau2` keeps of one arm-by-arm τ²
experiment (ledger.models.Experiment, one ExperimentRun per arm × replicate).

Writes (`open_experiment`, `record_run`, `close_experiment`) are each one
short transaction, so the report pages and `repro_tau2 list` see an experiment
as it progresses. Reads: `recent`, `arm_table`, `arm_comparisons`."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.db.models import Count, Q

from ledger.benchmarks.compare import CompareError, Comparison, compare_run_sets, compare_runs
from ledger.models import BenchmarkRun, Experiment, ExperimentRun

Outcome = ExperimentRun.Outcome


@dataclass(frozen=True)
class PlannedRun:
    arm: str
    replicate: int
    agent_model: str
    group: str


def open_experiment(
    *, name: str, domain: str, arms: Sequence[str], settings: dict[str, Any], key_name: str,
    budget_nanousd: int | None, estimate_nanousd: int | None, runs: Sequence[PlannedRun],
) -> Experiment:  # fmt: skip
    """Record a starting experiment with every planned run pending."""
    with transaction.atomic():
        experiment = Experiment.objects.create(
            name=name, benchmark=f"tau2-{domain}", domain=domain, arms=list(arms), settings=settings,
            key_name=key_name, budget_nanousd=budget_nanousd, estimate_nanousd=estimate_nanousd,
        )  # fmt: skip
        ExperimentRun.objects.bulk_create(
            ExperimentRun(experiment=experiment, arm=r.arm, replicate=r.replicate, agent_model=r.agent_model, group=r.group)
            for r in runs
        )
    return experiment


def record_run(
    experiment: Experiment, arm: str, replicate: int, *, outcome: str, detail: str = "",
    run: BenchmarkRun | None = None, simulations: int | None = None, spent_nanousd: int | None = None,
    progress: dict[str, Any] | None = None,
) -> None:  # fmt: skip
    """What came of one planned run (also called while it runs, for progress)."""
    fields: dict[str, Any] = {"outcome": outcome, "detail": detail[:500]}
    if run is not None:
        fields["run"] = run
    if simulations is not None:
        fields["simulations"] = simulations
    if spent_nanousd is not None:
        fields["spent_nanousd"] = spent_nanousd
    if progress is not None:
        fields["progress"] = progress
    ExperimentRun.objects.filter(experiment=experiment, arm=arm, replicate=replicate).update(**fields)


def note_spend(experiment: Experiment, spent_nanousd: int) -> None:
    Experiment.objects.filter(pk=experiment.pk).update(spent_nanousd=spent_nanousd)


def close_experiment(experiment: Experiment, *, spent_nanousd: int, stopped: str = "", decided: str = "") -> Experiment:
    """Set the final status from the runs' outcomes: stopped (budget or
    interruption, with its reason), complete, partial or failed. Runs still
    pending are marked stopped. `decided`: the stopping rule left the runs
    marked stopped out as not needed (the note says why), so the status is
    judged on the runs that ran."""
    # A run still pending did not finish: the experiment stopped before or during it.
    ExperimentRun.objects.filter(experiment=experiment, outcome=Outcome.PENDING).update(
        outcome=Outcome.STOPPED, detail=f"not finished: {stopped or 'the experiment ended'}"[:500]
    )
    outcomes = list(ExperimentRun.objects.filter(experiment=experiment).values_list("outcome", flat=True))
    if decided and not stopped:
        outcomes = [o for o in outcomes if o != Outcome.STOPPED]
    imported = outcomes.count(Outcome.IMPORTED)
    if stopped:
        status, note = Experiment.Status.STOPPED, stopped
    elif imported == len(outcomes):
        status, note = Experiment.Status.COMPLETE, decided
    elif imported:
        status, note = Experiment.Status.PARTIAL, f"{len(outcomes) - imported} of {len(outcomes)} runs not imported"
    else:
        status, note = Experiment.Status.FAILED, "no run imported"
    Experiment.objects.filter(pk=experiment.pk).update(
        status=status, note=note[:500], spent_nanousd=spent_nanousd, ended_at=datetime.now(UTC)
    )
    experiment.refresh_from_db()
    return experiment


@dataclass(frozen=True)
class Listed:
    experiment: Experiment
    imported: int  # runs imported
    planned: int  # runs planned


def recent(limit: int = 50) -> list[Listed]:
    """The newest experiments with how many of their runs were imported."""
    rows = Experiment.objects.annotate(
        n_imported=Count("runs", filter=Q(runs__outcome=Outcome.IMPORTED)), n_planned=Count("runs")
    )[:limit]
    return [Listed(e, e.n_imported, e.n_planned) for e in rows]


@dataclass
class ArmRow:
    """One arm of an experiment: its planned runs side by side."""

    arm: str
    agent_model: str
    group: str
    runs: list[ExperimentRun]

    @property
    def imported(self) -> list[BenchmarkRun]:
        return [r.run for r in self.runs if r.run is not None and r.outcome == Outcome.IMPORTED]


def arm_table(experiment: Experiment) -> list[ArmRow]:
    """The experiment's arms in their order (the baseline first), each with its runs by replicate."""
    rows: dict[str, ArmRow] = {}
    for planned in experiment.runs.select_related("run").order_by("replicate", "pk"):
        row = rows.setdefault(planned.arm, ArmRow(planned.arm, planned.agent_model, planned.group, []))
        row.runs.append(planned)
    order = {arm: i for i, arm in enumerate(experiment.arms)}
    return sorted(rows.values(), key=lambda r: order.get(r.arm, len(order)))


@dataclass
class ArmComparison:
    arm: str
    baseline: str
    comparison: Comparison | None
    problem: str = ""  # why there is no comparison


def arm_comparisons(experiment: Experiment, *, seed: int = 0, resamples: int = 2000) -> list[ArmComparison]:
    """Each non-baseline arm against the baseline (A = baseline, B = the arm),
    on this experiment's imported runs only: `compare RUN_A RUN_B` with one
    replicate a side, the groups' comparison restricted to these runs with more."""
    table = arm_table(experiment)
    if not table:
        return []
    # A several-domain experiment names its entries `<domain>/<arm>`: each domain's first is its baseline,
    # and arms are compared within their domain only.
    several = len(experiment.settings.get("domains") or []) > 1 if isinstance(experiment.settings, dict) else False
    bases: dict[str, ArmRow] = {}
    out: list[ArmComparison] = []
    for row in table:
        domain = row.arm.split("/", 1)[0] if several else ""
        base = bases.setdefault(domain, row)
        if base is row:
            continue
        if not base.imported or not row.imported:
            missing = base.arm if not base.imported else row.arm
            out.append(ArmComparison(row.arm, base.arm, None, f"no imported run of arm {missing!r}"))
            continue
        try:
            if len(base.imported) == len(row.imported) == 1:  # two runs: paired item by item, as `compare A B`
                comparison = compare_runs(base.imported[0], row.imported[0], seed=seed, resamples=resamples)
            else:
                comparison = compare_run_sets(
                    base.imported, row.imported, label_a=base.group, label_b=row.group, seed=seed, resamples=resamples
                )
        except CompareError as exc:
            out.append(ArmComparison(row.arm, base.arm, None, str(exc)))
            continue
        out.append(ArmComparison(row.arm, base.arm, comparison))
    return out
