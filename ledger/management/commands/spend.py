from __future__ import annotations

from datetime import date
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.benchmarks.cli import print_json
from ledger.reports.forms import SpendRangeForm
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
        "(--day) or a range of days (--since/--until; by default the last "
        f"{SpendRangeForm.DEFAULT_DAYS}, as GET /api/spend and the spend page). Use it as benchmark_import "
        "--cost-usd, or let --cost-from-spend read it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--day", help="one UTC day, YYYY-MM-DD")
        parser.add_argument("--since", help="the range's first UTC day, YYYY-MM-DD "
                            f"(default: {SpendRangeForm.DEFAULT_DAYS} days up to --until)")  # fmt: skip
        parser.add_argument("--until", help="the range's last UTC day, YYYY-MM-DD (default: today)")
        parser.add_argument("--json", action="store_true", help="print the figures as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["day"]:
            if options["since"] or options["until"]:
                raise CommandError("give --day or --since/--until, not both", returncode=2)
            since = until = _day(options["day"])
        else:
            # The same default range as GET /api/spend and the spend page (SpendRangeForm).
            until = _day(options["until"]) if options["until"] else utc_today()
            since = _day(options["since"]) if options["since"] else SpendRangeForm.days_before(until)
            if since > until:
                raise CommandError(f"--since {since} is after --until {until}", returncode=2)
        totals = spend_totals(since=since, until=until)
        if options["json"]:
            print_json(self, spend_dict(totals))
        else:
            self.stdout.write("\n".join(spend_lines(totals)))
