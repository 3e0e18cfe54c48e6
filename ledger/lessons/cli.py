"""What learn_lessons and import_tau2 --learn share: the options, and one
call that wires the upstream judge (settings.MARINA_LESSONS_JUDGE, which is
passthru/lessons_judge.py) to the learning loop and prints its report."""
from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.module_loading import import_string

from kernel import money
from ledger.benchmarks.errors import LedgerInputError
from ledger.lessons.learning import Report, learn
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


def run_learning(
    command: BaseCommand, results: str, options: dict[str, Any], run: BenchmarkRun | None, *, show: bool = True
) -> Report:
    # Named by a setting, not imported: the judge is passthru's, a layer above the ledger.
    UpstreamJudge = import_string(settings.MARINA_LESSONS_JUDGE)

    limit = budget(options)
    try:
        judge = UpstreamJudge(options["judge_model"])
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
