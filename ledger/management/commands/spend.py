from __future__ import annotations

from datetime import date
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.benchmarks.cli import print_json
from ledger.spend.cli import spend_dict, spend_lines
from ledger.spend.selectors import spend_totals, utc_today


def _day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise CommandError(f"not a day: {text!r} (use YYYY-MM-DD)", returncode=2) from None


class Command(BaseCommand):
    help = (
        "Print Marina's recorded spend (spend_daily) per requested model id and in total, for one UTC day "
        "(default today) or since a day. Use it as benchmark_import --cost-usd, or let "
        "--cost-from-spend read it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        when = parser.add_mutually_exclusive_group()
        when.add_argument("--day", help="one UTC day, YYYY-MM-DD (default: today)")
        when.add_argument("--since", help="every UTC day from this one, YYYY-MM-DD, to the latest recorded")
        parser.add_argument("--json", action="store_true", help="print the figures as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["since"]:
            totals = spend_totals(since=_day(options["since"]))
        else:
            day = _day(options["day"]) if options["day"] else utc_today()
            totals = spend_totals(since=day, until=day)
        if options["json"]:
            print_json(self, spend_dict(totals))
        else:
            self.stdout.write("\n".join(spend_lines(totals)))
