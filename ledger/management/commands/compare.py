"""manage.py compare: two runs, or two groups of runs, on their shared items."""
from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ledger.benchmarks.compare import CompareError, compare_groups, compare_runs
from ledger.benchmarks.compare_text import render_text
from ledger.benchmarks.stats import MAX_RESAMPLES
from ledger.reports.compare_json import as_json


class Command(BaseCommand):
    help = (
        "Compare benchmark run B against run A (compare RUN_A RUN_B) or group B against group A "
        "(compare --group A --group B) on the items both have: mean reward, pass^k, Wilson 95% "
        "intervals, cost per item, discordant counts with the exact McNemar p, and a bootstrap "
        "95% interval for the difference in pass^1. See docs/comparisons.md."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("runs", nargs="*", metavar="RUN", help="two run ids: A then B")
        parser.add_argument(
            "--group", action="append", default=[], metavar="GROUP", help="give twice: group A, then group B"
        )
        parser.add_argument("--tasks", action="store_true", help="add the per-task difference table")
        parser.add_argument(
            "--across-benchmarks", action="store_true",
            help="compare runs of different benchmarks or domains (refused without it: their items match only by task id)",
        )  # fmt: skip
        parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
        parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
        parser.add_argument(
            "--resamples", type=int, default=2000, help=f"bootstrap resamples, 1 to {MAX_RESAMPLES:,} (default 2000)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        runs: list[str] = options["runs"]
        groups: list[str] = options["group"]
        if not 1 <= options["resamples"] <= MAX_RESAMPLES:
            raise CommandError(
                f"--resamples must be between 1 and {MAX_RESAMPLES:,} (default 2000), not {options['resamples']}",
                returncode=2,
            )
        try:
            if groups:
                if runs or len(groups) != 2:
                    raise CommandError("give either two run ids or --group A --group B", returncode=2)
                result = compare_groups(
                    groups[0], groups[1], seed=options["seed"], resamples=options["resamples"],
                    across_benchmarks=options["across_benchmarks"],
                )  # fmt: skip
            else:
                if len(runs) != 2:
                    raise CommandError("give either two run ids or --group A --group B", returncode=2)
                result = compare_runs(
                    _run_id(runs[0]), _run_id(runs[1]), seed=options["seed"], resamples=options["resamples"],
                    across_benchmarks=options["across_benchmarks"],
                )  # fmt: skip
        except CompareError as exc:
            raise CommandError(str(exc), returncode=2) from None
        if options["json"]:
            self.stdout.write(json.dumps(as_json(result), indent=2))
        else:
            self.stdout.write(render_text(result, tasks=options["tasks"]), ending="")


def _run_id(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise CommandError(f"unknown run id {text!r}: run ids are integers", returncode=2) from None
