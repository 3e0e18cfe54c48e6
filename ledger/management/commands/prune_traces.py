from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.management.arguments import moment
from ledger.spend.retention import BATCH, Pruned, prune_traces, retention_cutoff


class Command(BaseCommand):
    help = (
        "Delete traces (and their spans) started before a cutoff, in small batches that never hold up the "
        "servers' writes. The cutoff is --before, else now minus MARINA_TRACE_RETENTION_DAYS. spend_daily and "
        "benchmark runs and items are never deleted."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--before", help="YYYY-MM-DD (00:00 UTC) or an ISO date-time")
        parser.add_argument("--dry-run", action="store_true", help="count what would be deleted, delete nothing")
        parser.add_argument("--batch", type=int, default=BATCH, help=f"traces per transaction (default {BATCH})")

    def handle(self, *args: Any, **options: Any) -> None:
        now = datetime.now(UTC)
        if options["before"]:
            before = moment("--before", options["before"])
        else:
            found = retention_cutoff(now)
            if found is None:
                raise CommandError("Traces are kept: give --before DATE, or set MARINA_TRACE_RETENTION_DAYS.")
            before = found
        if before > now:
            raise CommandError(f"--before {before:%Y-%m-%d %H:%M} UTC is in the future: that would delete every trace")
        if not 1 <= options["batch"] <= 100_000:
            raise CommandError("--batch must be between 1 and 100000")

        def progress(done: Pruned) -> None:
            if done.batches % 50 == 0:
                self.stderr.write(f"  {done.traces:,} traces deleted so far")

        result = prune_traces(before, size=options["batch"], dry_run=options["dry_run"], on_batch=progress)
        verb = "Would delete" if result.dry_run else "Deleted"
        # Whole days dropped with no row left to delete take no batch: "in 0 batch(es)" says nothing.
        batches = "" if result.dry_run or (result.days_dropped and not result.batches) else f" in {result.batches} batch(es)"
        if result.days_dropped:
            batches = f" ({result.days_dropped} whole day(s) dropped as partitions){batches}"
        self.stdout.write(
            f"{verb} {result.traces:,} traces and {result.spans:,} spans started before "
            f"{before:%Y-%m-%d %H:%M:%S} UTC{batches}. spend_daily and benchmark runs are kept."
        )
