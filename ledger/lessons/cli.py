"""What learn_lessons and import_tau2 --learn share: the options, and one
call that runs the learning loop with the judge the command hands in and
prints its report. The commands (repro/management/commands/) sit above both
apps: they hand in passthru's upstream judge (passthru/lessons_judge.py), which
the ledger never imports."""
from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Protocol

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kernel import money
from ledger.benchmarks.errors import LedgerInputError
from ledger.lessons.learning import Judged, Report, learn
from ledger.models import BenchmarkRun


def add_learn_options(parser: CommandParser, *, judge_required: bool) -> None:
    parser.add_argument("--judge-model", required=judge_required, help="the model that proposes lessons, e.g. openrouter/openai/gpt-5.2")
    parser.add_argument("--budget-usd", type=Decimal, help="stop once learning has spent this much (dollars)")
    parser.add_argument("--progress", action="store_true", default=None, help="draw the progress bar even when stderr is not a terminal")


def budget(options: dict[str, Any]) -> int | None:
    value = options.get("budget_usd")
    if value is None:
        return None
    if value <= 0:
        raise CommandError(f"--budget-usd must be a positive amount of dollars, not {value}", returncode=2)
    return money.to_nanousd(value)


class ClosableJudge(Protocol):
    """A judge (ledger.lessons.learning.Judge) that holds something to let go of when learning ends."""

    def __call__(self, messages: list[dict[str, str]]) -> Judged: ...

    def close(self) -> None: ...


def run_learning(
    command: BaseCommand,
    results: str,
    options: dict[str, Any],
    run: BenchmarkRun | None,
    *,
    make_judge: Callable[[str], ClosableJudge],
    show: bool = True,
) -> Report:
    """Learn from `results` with the judge `make_judge(--judge-model)` (a ValueError: the model cannot judge)."""
    limit = budget(options)
    try:
        judge = make_judge(options["judge_model"])
    except ValueError as exc:
        raise CommandError(str(exc), returncode=2) from None
    try:
        report = learn(
            results, judge=judge, judge_model=options["judge_model"], run=run,
            budget_nanousd=limit, progress=options.get("progress"),
        )  # fmt: skip
    except (LedgerInputError, ValueError) as exc:
        raise CommandError(str(exc), returncode=2) from None
    finally:
        judge.close()
    if not show:
        pass
    elif options.get("json"):
        command.stdout.write(json.dumps({"lessons": report.as_dict()}))
    else:
        command.stdout.write("\n".join(report.lines()))
    return report
