from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.lessons.cli import add_learn_options, run_learning
from ledger.models import BenchmarkRun
from passthru.lessons_judge import UpstreamJudge


class Command(BaseCommand):
    help = (
        "Learn lessons from the failed simulations of a τ² results.json: each conversation and its reward "
        "breakdown go to the judge model through Marina's upstream path; proposals that pass the leak guard "
        "are kept as unverified lessons (docs/lessons.md)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("results", help="τ² results.json")
        parser.add_argument("--run", type=int, metavar="RUN", help="the imported benchmark run these results are (provenance)")
        add_learn_options(parser, judge_required=True)
        parser.add_argument("--json", action="store_true", help="print the report as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        run = None
        if options["run"] is not None:
            run = BenchmarkRun.objects.filter(pk=options["run"]).first()
            if run is None:
                raise CommandError(f"--run {options['run']}: no such benchmark run", returncode=2)
        run_learning(self, options["results"], options, run, make_judge=UpstreamJudge)
