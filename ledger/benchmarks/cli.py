"""Text and JSON renderings shared by the ledger's management commands, so
the commands stay argument parsing plus printing."""
from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandError

from ledger.benchmarks.board import Verdict, assess
from ledger.benchmarks.cost_sources import cost_source_label
from ledger.benchmarks.errors import UncleanRunError
from ledger.benchmarks.importers import ImportResult
from ledger.benchmarks.ledgerfile import Ledger


def bad_input(exc: Exception) -> CommandError:
    """Bad input or options: one line (the error names the file), exit 2."""
    return CommandError(str(exc), returncode=2)


def refuse_unclean(command: BaseCommand, exc: UncleanRunError, *, as_json: bool) -> NoReturn:
    """--require-clean met infrastructure errors: say INVALID, no scores, exit 3."""
    if as_json:
        command.stdout.write(json.dumps({"file": exc.source, "invalid": True, "infra_errors": exc.infra_errors}))
    else:
        command.stdout.write(f"INVALID: {exc.infra_errors} infrastructure error(s)")
    raise CommandError(f"{exc.source}: refused by --require-clean; fix the cause and re-run", returncode=3)


@contextmanager
def reading_tau2(command: BaseCommand, *, as_json: bool) -> Iterator[None]:
    """Around reading a τ² results.json: a run --require-clean refuses says
    INVALID (exit 3); bad input or options are one line (exit 2)."""
    try:
        yield
    except UncleanRunError as exc:
        refuse_unclean(command, exc, as_json=as_json)
    except ValueError as exc:
        raise bad_input(exc) from None


def warn(command: BaseCommand, warnings: list[str]) -> None:
    for line in warnings:
        command.stderr.write(f"warning: {line}")


def print_json(command: BaseCommand, value: Any) -> None:
    command.stdout.write(json.dumps(value, indent=1, ensure_ascii=False))


def _figure(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.6f}"


def _verdict_lines(verdict: Verdict, indent: str = "") -> list[str]:
    if verdict.comparable:
        return [f"{indent}board comparable: yes"]
    return [f"{indent}board comparable: no"] + [f"{indent}  - {r}" for r in verdict.reasons]


def summary_lines(ledger: Ledger) -> list[str]:
    run = ledger.run
    summary = ledger.summary()
    lines = [
        f"{run.domain} · agent {run.agent.model or '?'} · user {run.user.model or '?'} · "
        f"{len(ledger.items)} simulations" + (f" · retrieval config {run.retrieval_config}" if run.retrieval_config else ""),
        f"mean reward {_figure(summary.mean_reward)}",
    ]
    lines += [f"pass^{k} {value:.6f}" for k, value in enumerate(summary.pass_hat_k, 1)]
    if summary.max_k < run.num_trials and summary.simulations:
        lines.append(f"(pass^k stops at k={summary.max_k}: the fewest evaluated trials of any task)")
    if ledger.infra_errors:
        lines.append(f"excluded {ledger.infra_errors} infrastructure error(s)")
    if ledger.skipped:
        lines.append(f"{ledger.skipped} skipped simulation(s) (failed model calls) counted as failures")
    return lines + _verdict_lines(assess(run, ledger.items))


def summary_dict(ledger: Ledger, source: str) -> dict[str, Any]:
    run = ledger.run
    summary = ledger.summary()
    verdict = assess(run, ledger.items)
    return {
        "file": source,
        "sha256": ledger.source.get("sha256"),
        "benchmark": run.benchmark,
        "domain": run.domain,
        "agent": run.agent.model,
        "user": run.user.model,
        "num_trials": run.num_trials,
        "seed": run.seed,
        "task_split": verdict.task_split or None,
        "retrieval_config": run.retrieval_config,
        "tau2": run.tau2,
        "simulations": len(ledger.items),
        "evaluated": summary.simulations,
        "tasks": summary.tasks,
        "infra_errors": ledger.infra_errors,
        "skipped": ledger.skipped,
        "mean_reward": summary.mean_reward,
        "pass_hat_k": summary.pass_hat_k,
        "started_at": run.started_at,
        "ended_at": run.ended_at,
        "comparable": verdict.comparable,
        "comparability_reasons": verdict.reasons,
    }


def import_lines(result: ImportResult) -> list[str]:
    run = result.run
    if result.existing:
        return [
            f"already recorded as run #{run.pk}: {run.benchmark} · {run.target_kind} {run.target} ({result.source})"
        ]
    head = "dry run, would record" if result.dry_run else f"recorded run #{run.pk}:"
    group = f" · group {run.group}" if run.group else ""
    lines = [f"{head} {run.benchmark} · {run.target_kind} {run.target}{group} · {run.simulations} simulations"]
    figures = [f"mean reward {_figure(run.mean_reward)}"]
    figures += [f"pass^{k} {value:.6f}" for k, value in enumerate(run.pass_hat_k, 1)]
    lines.append("  " + " · ".join(figures))
    lines.append(f"  cost {run.cost_shown} (source {cost_source_label(run.cost_source)}: {result.cost_note})")
    if run.infra_errors:
        lines.append(f"  excluded {run.infra_errors} infrastructure error(s)")
    if run.skipped:
        lines.append(f"  {run.skipped} skipped simulation(s) (failed model calls) counted as failures")
    if run.judge:
        lines.append(f"  judge {run.judge}")
    if run.retrieval_config:
        lines.append(f"  retrieval config {run.retrieval_config}")
    if result.links is not None:
        lines.append(f"  traces: {result.links.note()}")
    return lines + _verdict_lines(result.verdict, "  ")
