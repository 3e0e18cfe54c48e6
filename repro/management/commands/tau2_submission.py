"""manage.py tau2_submission: ledger runs → a leaderboard submission directory,
checked, prepared and validated with the installed τ² (docs/repro.md)."""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.benchmarks import submission as sub
from repro import submission


class Command(BaseCommand):
    help = (
        "Check τ² runs of the ledger against the leaderboard's rules (PASS/WARN/FAIL, exit 3 on a FAIL unless "
        "--allow-incomplete), then prepare a submission with `tau2 submit prepare` on scrubbed copies of their "
        "results files, fill in Marina's cost, the submission type and methodology notes, and validate it with "
        "`tau2 submit validate`."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("runs", nargs="*", type=int, metavar="RUN", help="ledger run ids, one per domain")
        parser.add_argument("--group", help="every run of this group instead")
        parser.add_argument(
            "--results", nargs="+", default=[], metavar="PATH",
            help="the runs' τ² results files, or directories holding them (matched to the runs by content)",
        )  # fmt: skip
        parser.add_argument("--out", required=True, help="the submission directory to make (new or empty)")
        parser.add_argument("--allow-incomplete", action="store_true", help="prepare it even when a check FAILs")
        parser.add_argument(
            "--submission-type", choices=("auto", sub.STANDARD, sub.CUSTOM), default="auto",
            help="auto (default): custom for a formation, a stack or a crew, else standard",
        )  # fmt: skip

    def handle(self, *args: Any, **o: Any) -> None:
        try:
            runs = sub.select_runs(o["runs"], o["group"])
            result = submission.build(
                runs, o["results"], o["out"], allow_incomplete=o["allow_incomplete"],
                submission_type=o["submission_type"],
            )  # fmt: skip
        except (sub.SubmissionError, submission.SubmissionRefused) as exc:
            raise CommandError(str(exc), returncode=2) from None
        for line in submission.render(result):
            self.stdout.write(line)
        code = submission.exit_code(result, allow_incomplete=o["allow_incomplete"])
        if code:
            raise CommandError(result.stopped or f"τ² did not validate {result.out}", returncode=code)
