"""Argument forms shared by the management commands (ledger's and observability's)."""
from __future__ import annotations

from datetime import UTC, datetime, time
from decimal import Decimal

from django.core.management.base import CommandError, CommandParser


def moment(flag: str, text: str) -> datetime:
    """YYYY-MM-DD (that day's 00:00 UTC) or an ISO date-time (UTC unless it says
    otherwise); anything else is a one-line CommandError naming `flag`."""
    try:
        if len(text) == 10:
            return datetime.combine(datetime.strptime(text, "%Y-%m-%d").date(), time(0), tzinfo=UTC)
        found = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(f"{flag}: {text!r} is not a date (YYYY-MM-DD) or an ISO date-time") from None
    return found if found.tzinfo else found.replace(tzinfo=UTC)


def add_import_options(parser: CommandParser, *, target_required: bool = True) -> None:
    """The flags of ledger.benchmarks.options.ImportOptions but --target-kind
    (whose default differs), for benchmark_import and import_tau2;
    `ImportOptions.from_command` reads them back."""
    parser.add_argument(
        "--target", required=target_required, help="what was measured: a model id as served, or a crew id"
    )
    replicate = parser.add_mutually_exclusive_group()
    replicate.add_argument("--group", help="replicate group key (letters, digits, : . _ @ / -)")
    replicate.add_argument(
        "--replicate-of", type=int, metavar="RUN",
        help="record as a replicate of run RUN: join its group (run-RUN when it has none)",
    )  # fmt: skip
    parser.add_argument("--label", help="free label shown in reports")
    parser.add_argument("--judge", help="who scored the items, e.g. '<model> @ <route>' (default: the file's)")
    cost = parser.add_mutually_exclusive_group()
    cost.add_argument("--cost-usd", type=Decimal, help="the run's cost in dollars (source: cli)")
    cost.add_argument(
        "--cost-from-spend", action="store_true",
        help="the run's cost from Marina's own records: its items' linked traces when every item has some "
        "(source: traces), else spend_daily for its agent and user model ids over its UTC days (source: spend); "
        "only for a run made through this Marina (the same database), refused otherwise",
    )  # fmt: skip
    parser.add_argument(
        "--key", action="append", metavar="NAME", dest="keys", type=str,
        help="a Marina key the run used (repeatable): its items are linked only to that key's traces "
        "(an operator key's: its callers' too). Without it every key's traces are candidates",
    )  # fmt: skip
    parser.add_argument("--dry-run", action="store_true", help="check and show what would be recorded; write nothing")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
