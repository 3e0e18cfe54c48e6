from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ledger.benchmarks.cli import bad_input, import_lines, print_json, warn
from ledger.benchmarks.importers import TARGET_KINDS, import_ledgers


def add_import_options(parser: CommandParser) -> None:
    """Options shared by benchmark_import and import_tau2."""
    parser.add_argument("--target", required=True, help="what was measured: a model id as served, or a crew id")
    parser.add_argument("--group", help="replicate group key (letters, digits, : . _ @ / -)")
    parser.add_argument("--label", help="free label shown in reports")
    cost = parser.add_mutually_exclusive_group()
    cost.add_argument("--cost-usd", type=Decimal, help="the run's cost in dollars (source: cli)")
    cost.add_argument(
        "--cost-from-spend", action="store_true",
        help="the run's cost from Marina's spend_daily for its agent and user model ids over its UTC days",
    )  # fmt: skip
    parser.add_argument("--dry-run", action="store_true", help="check and show what would be recorded; write nothing")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def import_options(options: dict[str, Any]) -> dict[str, Any]:
    return {
        "target_kind": options["target_kind"],
        "target": options["target"],
        "group": options["group"],
        "label": options["label"],
        "cost_usd": options["cost_usd"],
        "cost_from_spend": options["cost_from_spend"],
        "dry_run": options["dry_run"],
    }


class Command(BaseCommand):
    help = (
        "Import ledger files (written by tau2_convert) as benchmark runs. All files or none; "
        "a file imported before returns its existing run."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("ledgers", nargs="+", metavar="LEDGER.json")
        parser.add_argument("--target-kind", required=True, choices=TARGET_KINDS)
        add_import_options(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            results = import_ledgers(options["ledgers"], **import_options(options))
        except ValueError as exc:
            raise bad_input(exc) from None
        for result in results:
            warn(self, result.warnings)
        if options["json"]:
            print_json(self, [r.as_dict() for r in results])
            return
        for result in results:
            self.stdout.write("\n".join(import_lines(result)))
