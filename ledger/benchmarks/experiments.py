"""Experiments: the record `manage.py repro_tau2` keeps of one arm-by-arm τ²
experiment (ledger.models.Experiment, one ExperimentRun per arm × replicate).

Writes (`open_experiment`, `record_run`, `close_experiment`) are each one
short transaction, so the report pages and `repro_tau2 list` see an experiment
as it progresses. Reads: `recent`, `arm_table`, `arm_comparisons`."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.db.models import Count, Q, Sum

from kernel import money
from ledger.benchmarks.compare import CompareError, Comparison, compare_run_sets, compare_runs
from ledger.models import BenchmarkRun, Experiment, ExperimentRun, SpendDaily

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


FALLBACK_FLAG = "--unpriced-usd-per-mtok"


@dataclass(frozen=True)
class Spent:
    """What an experiment's budget counted, as one figure with its basis: its key's
    priced calls at their cost, plus, when the kit was given a fallback price, the
    unpriced calls' tokens at that price. An amount with unpriced calls in it never
    reads as a plain dollar figure: it says it is the fallback price, or a lower bound."""

    nanousd: int | None
    unpriced_calls: int
    fallback_usd_per_mtok: str | None  # as given to --unpriced-usd-per-mtok

    @property
    def basis(self) -> str:
        """priced | fallback price | lower bound (unpriced calls not counted) | unknown (none priced)."""
        if not self.unpriced_calls:
            return "priced"
        if self.fallback_usd_per_mtok is not None:
            return "fallback price"
        return "unknown" if not self.nanousd else "lower bound"

    @property
    def basis_note(self) -> str:
        """The basis in words ('' when every call was priced)."""
        n = self.unpriced_calls
        if self.basis == "fallback price":
            return (f"{n} unpriced call(s) counted at the fallback price of ${self.fallback_usd_per_mtok} per million "
                    f"tokens ({FALLBACK_FLAG}): a budget estimate, not a bill")  # fmt: skip
        if self.basis in ("lower bound", "unknown"):
            return f"{n} call(s) nobody could price are not in it"
        return ""

    def shown(self, amount: int | None = None, *, fmt: Callable[[money.Amount], str] = money.dollars) -> str:
        """`amount` (default: the experiment's) on this basis: "$x", "$x at the fallback price",
        "≥ $x (n unpriced)" or "unpriced (n calls)"; `fmt` writes the amount (`money.short` on a page)."""
        amount = self.nanousd if amount is None else amount
        if self.basis == "fallback price":
            return f"{fmt(amount)} at the fallback price"
        if self.basis == "priced":
            return fmt(amount)
        return money.with_unpriced(amount, self.unpriced_calls, fmt=fmt)

    @property
    def shown_short(self) -> str:
        """`shown` as a page writes money ($0.0180 at the fallback price; the exact figure in the title)."""
        return self.shown(fmt=money.short)

    def part(self, amount: int, *, fmt: Callable[[money.Amount], str] = money.dollars) -> str:
        """One arm's share on this basis: "$x", "$x at the fallback price", "≥ $x" or "unpriced"."""
        if self.basis == "fallback price":
            return f"{fmt(amount)} at the fallback price"
        if self.basis == "unknown":
            return "unpriced"
        return fmt(amount) if self.basis == "priced" else f"≥ {fmt(amount)}"

    def as_json(self) -> dict[str, Any]:
        return {
            "spent_usd": None if self.basis == "unknown" else money.plain(self.nanousd or 0),
            "spent_basis": self.basis,
            "spent_note": self.basis_note,
            "unpriced_calls": self.unpriced_calls,
            "fallback_usd_per_mtok": self.fallback_usd_per_mtok,
        }


def spent(experiment: Experiment, unpriced_calls: int) -> Spent:
    """The experiment's spend with its basis, given its key's unpriced calls."""
    fallback = (experiment.settings or {}).get("unpriced_usd_per_mtok")
    return Spent(experiment.spent_nanousd, unpriced_calls, None if fallback is None else str(fallback))


def unpriced_calls_by_key(key_names: Sequence[str]) -> dict[str, int]:
    """Each key's calls nobody could price (all days), in one statement."""
    rows = SpendDaily.objects.filter(key_name__in=[k for k in key_names if k]).order_by()
    return dict(rows.values("key_name").annotate(n=Sum("unpriced_calls")).values_list("key_name", "n"))


@dataclass(frozen=True)
class Listed:
    experiment: Experiment
    imported: int  # runs imported
    planned: int  # runs planned
    spent: Spent


def recent(limit: int = 50) -> list[Listed]:
    """The newest experiments with how many of their runs were imported, and their spend with its basis."""
    rows = list(Experiment.objects.annotate(
        n_imported=Count("runs", filter=Q(runs__outcome=Outcome.IMPORTED)), n_planned=Count("runs")
    )[:limit])  # fmt: skip
    unpriced = unpriced_calls_by_key([e.key_name for e in rows])
    return [Listed(e, e.n_imported, e.n_planned, spent(e, unpriced.get(e.key_name, 0))) for e in rows]


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
