from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction

from ledger.spend import partitions


class Command(BaseCommand):
    help = (
        "PostgreSQL: list the day partitions of traces and spans (estimated rows, size), make the days ahead "
        "(--ensure; each server also does this once an hour), or convert unpartitioned tables (--convert: "
        "migration 0015 does it unless MARINA_TRACE_PARTITIONS was off). Retention (prune_traces, "
        "MARINA_TRACE_RETENTION_DAYS) drops whole days."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        what = parser.add_mutually_exclusive_group()
        what.add_argument(
            "--ensure", action="store_true",
            help=f"make yesterday's, today's and the next MARINA_TRACE_PARTITION_DAYS_AHEAD "
            f"({settings.MARINA_TRACE_PARTITION_DAYS_AHEAD}) days' partitions",
        )
        what.add_argument(
            "--convert", action="store_true",
            help="copy unpartitioned ledger_trace and ledger_span into partitioned tables, in one transaction "
            "(servers' writes wait in their spool meanwhile)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if connection.vendor != "postgresql":
            raise CommandError(f"Traces are partitioned only on PostgreSQL; this database is {connection.vendor}.")
        if options["convert"]:
            with transaction.atomic():
                done = partitions.convert()
            if done is None:
                self.stdout.write("Traces are partitioned already: nothing to convert.")
            else:
                self.stdout.write(
                    f"Converted {done.traces:,} traces and {done.spans:,} spans into {done.days} day partitions "
                    f"in {done.seconds:.1f} s."
                )
            return
        if not partitions.is_partitioned():
            raise CommandError(
                "Traces are not partitioned on this database (MARINA_TRACE_PARTITIONS was off when migration 0015 "
                "ran): run `manage.py trace_partitions --convert`."
            )
        if options["ensure"]:
            made = partitions.ensure_days_ahead()
            names = ", ".join(f"{day:%Y-%m-%d}" for day in made) or "none: every day ahead has one"
            self.stdout.write(f"Partitions made: {names}.")
            return
        for row in partitions.listing():
            label = "DEFAULT   " if row.day is None else f"{row.day:%Y-%m-%d}"
            self.stdout.write(f"{label}  ~{row.traces:>12,} traces  {row.bytes / 2**20:>10,.1f} MiB")
