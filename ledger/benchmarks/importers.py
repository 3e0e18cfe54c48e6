"""Importing benchmark runs into the ledger: a ledger JSON file
(`import_ledger`) or a τ² results.json directly (`import_tau2`).

Every import is all-or-nothing (the file is parsed and checked completely
before one transaction writes the run and its items) and idempotent (keyed by
the SHA-256 of the τ² results file: importing it again, directly or through
its ledger file, returns the existing run)."""
from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Sum

from ledger.benchmarks import checks, metrics
from ledger.benchmarks.board import Verdict, assess
from ledger.benchmarks.credentials import strip_secrets
from ledger.benchmarks.errors import LedgerInputError, UncleanRunError
from ledger.benchmarks.ledgerfile import Ledger, read_ledger, write_ledger
from ledger.benchmarks.tau2.convert import to_ledger
from ledger.benchmarks.tau2.results import parse_time, read_results
from ledger.models import BenchmarkItem, BenchmarkRun, SpendDaily
from marina.money import to_nanousd

TARGET_KINDS = ("model", "crew")
# Group keys are short labels (as the original Marina's): letters, digits and : . _ @ / -
_GROUP = re.compile(r"^[A-Za-z0-9:._@/-]{1,120}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass
class ImportResult:
    """What an import did (or, with dry_run, would do)."""

    run: BenchmarkRun  # saved, or the existing run, or unsaved on a dry run
    created: bool  # False: dry run, or the file was imported before
    dry_run: bool
    source: str
    items: int
    summary: metrics.Summary
    verdict: Verdict
    cost_note: str = ""
    warnings: list[str] = field(default_factory=list)

    @property
    def existing(self) -> bool:
        return not self.created and self.run.pk is not None

    def as_dict(self) -> dict[str, Any]:
        run = self.run
        cost = run.cost_usd
        return {
            "run_id": run.pk,
            "created": self.created,
            "already_imported": self.existing,
            "dry_run": self.dry_run,
            "source": self.source,
            "sha256": run.source_sha256,
            "benchmark": run.benchmark,
            "target_kind": run.target_kind,
            "target": run.target,
            "group": run.group,
            "label": run.label,
            "agent_model": run.agent_model,
            "user_model": run.user_model,
            "simulations": run.simulations,
            "evaluated": self.summary.simulations,
            "infra_errors": run.infra_errors,
            "skipped": run.skipped,
            "mean_reward": run.mean_reward,
            "pass_hat_k": run.pass_hat_k,
            "cost_usd": None if cost is None else f"{cost:.8f}",
            "cost_source": run.cost_source,
            "cost_note": self.cost_note,
            "comparable": run.comparable,
            "comparability_reasons": run.comparability_reasons,
            "started_at": run.started_at.isoformat() if run.started_at else None,
            "ended_at": run.ended_at.isoformat() if run.ended_at else None,
            "warnings": self.warnings,
        }


def load_tau2(results_path: str | Path, *, require_clean: bool = False, progress: bool | None = None) -> Ledger:
    """Read a τ² results file into a ledger (nothing written anywhere).
    With require_clean, a run with infrastructure errors raises UncleanRunError."""
    results = read_results(results_path, progress=progress)
    if require_clean and results.infra_errors:
        raise UncleanRunError(results_path, results.infra_errors)
    return to_ledger(results)


def default_ledger_path(results_path: str | Path) -> Path:
    path = Path(results_path)
    name = path.name[: -len(".json")] if path.name.endswith(".json") else path.name
    return path.with_name(f"{name}.ledger.json")


def convert_tau2(
    results_path: str | Path, out: str | Path | None = None, *, require_clean: bool = False,
    progress: bool | None = None,
) -> tuple[Ledger, Path]:  # fmt: skip
    """Write the ledger file for a τ² results file (default `<name>.ledger.json`
    beside it). Nothing is written when the input is refused."""
    ledger = load_tau2(results_path, require_clean=require_clean, progress=progress)
    target = Path(out) if out else default_ledger_path(results_path)
    try:
        write_ledger(ledger, target)
    except OSError as exc:
        raise LedgerInputError(target, f"cannot write: {exc.strerror}") from None
    return ledger, target


def import_ledger(
    path_or_data: str | Path | dict[str, Any],
    *,
    target_kind: str,
    target: str,
    group: str | None = None,
    label: str | None = None,
    cost_usd: float | Decimal | None = None,
    cost_from_spend: bool = False,
    dry_run: bool = False,
) -> ImportResult:
    """Import a ledger file (or its parsed data) as one BenchmarkRun with its items."""
    _check_options(target_kind, target, group, label, cost_usd, cost_from_spend)
    ledger = read_ledger(path_or_data)
    name = "<ledger data>" if isinstance(path_or_data, dict) else str(path_or_data)
    sha = ledger.source.get("sha256")
    if not (isinstance(sha, str) and _SHA256.match(sha)):
        # A ledger that does not name its source is keyed by its own content.
        if isinstance(path_or_data, dict):
            sha = hashlib.sha256(json.dumps(path_or_data, sort_keys=True).encode()).hexdigest()
        else:
            sha = hashlib.sha256(Path(path_or_data).read_bytes()).hexdigest()
    source_name = ledger.source.get("name") if isinstance(ledger.source.get("name"), str) else Path(name).name
    return _import(
        ledger, sha=sha, source=name, source_name=source_name, target_kind=target_kind, target=target,
        group=group, label=label, cost_usd=cost_usd, cost_from_spend=cost_from_spend, dry_run=dry_run,
    )  # fmt: skip


def import_ledgers(paths: list[str | Path], **options: Any) -> list[ImportResult]:
    """Several ledger files (same options) in one transaction: if one file is
    refused, none is recorded."""
    if options.get("cost_usd") is not None and len(paths) > 1:
        raise ValueError("--cost-usd is one run's cost: give exactly one file with it")
    with transaction.atomic():
        return [import_ledger(p, **options) for p in paths]


def import_tau2(
    results_path: str | Path,
    *,
    target_kind: str = "model",
    target: str,
    group: str | None = None,
    label: str | None = None,
    cost_usd: float | Decimal | None = None,
    cost_from_spend: bool = False,
    require_clean: bool = False,
    dry_run: bool = False,
    progress: bool | None = None,
) -> ImportResult:
    """Convert a τ² results.json and import it in one step (no ledger file is
    written). Same result as `tau2_convert` followed by `import_ledger`."""
    _check_options(target_kind, target, group, label, cost_usd, cost_from_spend)
    ledger = load_tau2(results_path, require_clean=require_clean, progress=progress)
    return _import(
        ledger, sha=ledger.source["sha256"], source=str(results_path), source_name=Path(results_path).name,
        target_kind=target_kind, target=target, group=group, label=label, cost_usd=cost_usd,
        cost_from_spend=cost_from_spend, dry_run=dry_run,
    )  # fmt: skip


def _check_options(
    target_kind: str, target: str, group: str | None, label: str | None, cost_usd: float | Decimal | None,
    cost_from_spend: bool,
) -> None:  # fmt: skip
    if target_kind not in TARGET_KINDS:
        raise ValueError(f"--target-kind must be one of {', '.join(TARGET_KINDS)}, not {target_kind!r}")
    if not target or len(target) > 200:
        raise ValueError("--target must be a model id or crew id of 1 to 200 characters")
    if group is not None and (not _GROUP.match(group) or group.startswith("auto:")):
        raise ValueError("--group must be 1 to 120 letters, digits or : . _ @ / - (not starting auto:)")
    if label is not None and len(label) > 200:
        raise ValueError("--label must be at most 200 characters")
    if cost_usd is not None:
        if cost_from_spend:
            raise ValueError("give --cost-usd or --cost-from-spend, not both")
        if not math.isfinite(float(cost_usd)) or not 0 <= cost_usd <= checks.MAX_RUN_COST_USD:
            raise ValueError(f"--cost-usd must be a number of dollars from 0 to {checks.MAX_RUN_COST_USD:,.0f}")


def _fit(source: str, what: str, value: str, limit: int) -> str:
    if len(value) > limit:
        raise LedgerInputError(source, f"{what} is longer than {limit} characters")
    return value


def _import(
    ledger: Ledger, *, sha: str, source: str, source_name: str, target_kind: str, target: str,
    group: str | None, label: str | None, cost_usd: float | Decimal | None, cost_from_spend: bool, dry_run: bool,
) -> ImportResult:  # fmt: skip
    summary = ledger.summary()
    verdict = assess(ledger.run, ledger.items)
    warnings = list(ledger.warnings)
    existing = BenchmarkRun.objects.filter(source_sha256=sha).first()
    if existing is not None:
        warnings.append(f"{source}: already imported as run #{existing.pk} ({existing.target}); nothing written")
        return ImportResult(existing, False, dry_run, source, len(ledger.items), summary, verdict, "", warnings)

    run_ = ledger.run
    started, ended = parse_time(run_.started_at), parse_time(run_.ended_at)
    cost_nanousd, cost_source, cost_note = _cost(
        ledger, source, started, ended, cost_usd=cost_usd, cost_from_spend=cost_from_spend, warnings=warnings
    )
    run = BenchmarkRun(
        benchmark=_fit(source, "the benchmark name", run_.benchmark, 64),
        domain=_fit(source, "the domain", run_.domain, 64),
        target_kind=target_kind,
        target=target,
        group=group or "",
        label=label or "",
        seed=run_.seed,
        task_split=_fit(source, "the task split", verdict.task_split, 64),
        num_trials=run_.num_trials,
        agent_model=_fit(source, "the agent model id", run_.agent.model, 200),
        user_model=_fit(source, "the user model id", run_.user.model, 200),
        agent_args=strip_secrets(run_.agent.args),
        user_args=strip_secrets(run_.user.args),
        tau2_version=_fit(source, "the τ² distribution", run_.tau2.get("distribution", ""), 64),
        tau2_commit=_fit(source, "the τ² commit", run_.tau2.get("git_commit", ""), 64),
        source_sha256=sha,
        source_name=source_name[:255],
        cost_nanousd=cost_nanousd,
        cost_source=cost_source,
        simulations=len(ledger.items),
        infra_errors=ledger.infra_errors,
        skipped=ledger.skipped,
        status="complete",
        comparable=verdict.comparable,
        comparability_reasons=verdict.reasons,
        mean_reward=summary.mean_reward,
        pass_hat_k=summary.pass_hat_k,
        started_at=started,
        ended_at=ended,
    )
    items = [
        BenchmarkItem(
            item_id=_fit(source, "an item id", i.id, 200),
            task_id=_fit(source, "a task id", i.task_id, 190),
            trial=i.trial,
            reward=i.reward,
            correct=i.correct,
            infra_error=i.infra_error,
            skipped=i.skipped,
            termination_reason=_fit(source, "a termination reason", i.termination_reason, 64),
            duration_s=i.duration_s,
            agent_cost_usd=i.agent_cost_usd,
            user_cost_usd=i.user_cost_usd,
            reward_breakdown=i.reward_breakdown,
        )
        for i in ledger.items
    ]
    if dry_run:
        return ImportResult(run, False, True, source, len(items), summary, verdict, cost_note, warnings)
    try:
        with transaction.atomic():
            run.save()
            for item in items:
                item.run = run
            BenchmarkItem.objects.bulk_create(items, batch_size=500)
    except IntegrityError:
        # A concurrent import of the same file won the unique source_sha256.
        existing = BenchmarkRun.objects.filter(source_sha256=sha).first()
        if existing is None:
            raise
        warnings.append(f"{source}: already imported as run #{existing.pk} ({existing.target}); nothing written")
        return ImportResult(existing, False, False, source, len(items), summary, verdict, "", warnings)
    return ImportResult(run, True, False, source, len(items), summary, verdict, cost_note, warnings)


def _cost(
    ledger: Ledger, source: str, started: Any, ended: Any, *, cost_usd: float | Decimal | None, cost_from_spend: bool,
    warnings: list[str],
) -> tuple[int | None, str, str]:  # fmt: skip
    """(nano-dollars, source, note): the flag's amount; Marina's own spend for
    the run's models over its UTC days; τ²'s own costs; or unpriced."""
    if cost_usd is not None:
        return to_nanousd(cost_usd), "cli", "given with --cost-usd"
    if cost_from_spend:
        models = sorted({ledger.run.agent.model, ledger.run.user.model} - {""})
        if started is None or ended is None:
            raise LedgerInputError(
                source, "--cost-from-spend: the run has no simulation times, so its days are unknown"
            )
        first, last = started.date(), ended.date()
        totals = SpendDaily.objects.filter(requested_model__in=models, day__gte=first, day__lte=last).aggregate(
            cost=Sum("cost_nanousd"), calls=Sum("calls"), unpriced=Sum("unpriced_calls")
        )
        days = f"{first}" if first == last else f"{first}..{last}"
        if not totals["calls"]:
            raise LedgerInputError(
                source, f"--cost-from-spend: Marina recorded no calls to {', '.join(models)} on {days} (UTC)"
            )
        if totals["unpriced"]:
            warnings.append(
                f"{source}: {totals['unpriced']} of {totals['calls']} calls to these models were unpriced; "
                "the spend total is a lower bound"
            )
        note = (
            f"spend_daily for {', '.join(models)} on {days} (UTC): whole days, so it includes every call "
            "to these model ids on those days, this run's and any other's"
        )
        return int(totals["cost"] or 0), "spend", note
    evaluated = [i for i in ledger.items if not i.infra_error]
    if evaluated and all(i.agent_cost_usd is not None and i.user_cost_usd is not None for i in evaluated):
        total = sum(Decimal(str(i.agent_cost_usd)) + Decimal(str(i.user_cost_usd)) for i in evaluated)
        if total > checks.MAX_RUN_COST_USD:
            raise LedgerInputError(source, f"the simulations' costs add up to more than ${checks.MAX_RUN_COST_USD:,.0f}")
        if total > 0:
            return to_nanousd(total), "tau2", "τ²'s own agent + user costs (LiteLLM)"
        # LiteLLM prices ids it does not know at 0.0 (tau2-facts §1): a $0 run is unpriced, not free.
        return None, "none", "τ² reported $0 for every simulation (LiteLLM could not price the models)"
    return None, "none", "no --cost-usd or --cost-from-spend, and τ² did not price every simulation"


