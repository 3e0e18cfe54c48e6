"""manage.py export_traces: stored traces as OTLP/JSON or flat JSON lines."""
from __future__ import annotations

import os
import sys
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ledger.management.arguments import moment
from observability.export import FORMATS, Exported, export_traces


class Command(BaseCommand):
    help = (
        "Write the traces started from --since (up to --until) for offline tools, oldest first, streaming: "
        "--format otlp-json (OTLP's JSON, one ExportTraceServiceRequest per trace and line, postable to a "
        "collector's /v1/traces) or jsonl (one span per line). Same span ids and attributes as the live "
        "OpenTelemetry export; message content only with MARINA_TRACE_BODIES=on. See docs/observability.md."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        # Checked in handle(), not by argparse, so a mistake is one line, not usage text.
        parser.add_argument("--since", help="YYYY-MM-DD (00:00 UTC) or an ISO date-time; required")
        parser.add_argument("--until", help="exclusive end, same forms (default: now)")
        parser.add_argument("--format", default="otlp-json", help=f"{' or '.join(FORMATS)} (default otlp-json)")
        parser.add_argument("--out", metavar="FILE", help="write here (replaced only once complete) instead of stdout")

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["since"]:
            raise CommandError("--since is required: YYYY-MM-DD or an ISO date-time")
        since = moment("--since", options["since"])
        until = moment("--until", options["until"]) if options["until"] else None
        if until is not None and until <= since:
            raise CommandError(f"--until {options['until']} is not after --since {options['since']}")
        fmt = options["format"]
        if fmt not in FORMATS:
            raise CommandError(f"--format must be {' or '.join(FORMATS)}, not {fmt!r}")
        if not options["out"]:
            try:
                done = export_traces(self.stdout, since=since, until=until, fmt=fmt)
            except BrokenPipeError:
                # The reader left (`| head`): stop quietly, as a Unix filter does, instead of a
                # traceback, and another when Python flushes stdout on the way out.
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                raise SystemExit(1) from None
            self.stderr.write(_summary(done, "stdout"))
            return
        target = Path(options["out"])
        partial = target.with_name(f".{target.name}.partial")
        try:
            with open(partial, "w", encoding="utf-8") as out:
                done = export_traces(out, since=since, until=until, fmt=fmt)
            os.replace(partial, target)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise CommandError(f"--out {target}: {exc.strerror or exc}") from None
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        self.stderr.write(_summary(done, str(target)))


def _summary(done: Exported, where: str) -> str:
    return f"Exported {done.traces:,} traces ({done.spans:,} spans) to {where}."
