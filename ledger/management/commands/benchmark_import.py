from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.benchmarks import validity
from ledger.benchmarks.cli import bad_input, import_lines, print_json, warn
from ledger.benchmarks.importers import import_each, import_ledgers
from ledger.benchmarks.options import TARGET_KINDS, ImportOptions
from ledger.management.arguments import add_import_options


class Command(BaseCommand):
    help = (
        "Import ledger files (Marina's, written by tau2_convert, or the original Marina's) as benchmark runs. "
        "Files: all or none, in one transaction. A directory: every ledger or τ² results file in it, each in "
        "its own transaction, a line per file, exit 1 if any failed. A file imported before returns its "
        "existing run. Also --invalidate RUN --reason TEXT and --revalidate RUN."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("ledgers", nargs="*", metavar="LEDGER.json|DIR")
        parser.add_argument("--target-kind", choices=TARGET_KINDS)
        add_import_options(parser, target_required=False)
        parser.add_argument("--invalidate", type=int, metavar="RUN", help="mark run RUN invalid (needs --reason)")
        parser.add_argument("--revalidate", type=int, metavar="RUN", help="mark invalid run RUN valid again")
        parser.add_argument("--reason", help="why, for --invalidate / --revalidate")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["invalidate"] is not None or options["revalidate"] is not None:
            return self._validity(options)
        paths: list[str] = options["ledgers"]
        if not paths:
            raise CommandError("give ledger files or a directory (or --invalidate/--revalidate RUN)", returncode=2)
        if not options["target_kind"] or not options["target"]:
            raise CommandError("importing needs --target-kind and --target", returncode=2)
        if options["reason"]:
            raise CommandError("--reason goes with --invalidate or --revalidate", returncode=2)
        if any(Path(p).is_dir() for p in paths):
            return self._directories(paths, options)
        try:
            results = import_ledgers(paths, ImportOptions.from_command(options))
        except ValueError as exc:
            raise bad_input(exc) from None
        for result in results:
            warn(self, result.warnings)
        if options["json"]:
            print_json(self, [r.as_dict() for r in results])
            return
        for result in results:
            self.stdout.write("\n".join(import_lines(result)))

    def _directories(self, paths: list[str], options: dict[str, Any]) -> None:
        """Directories (and any files beside them): each file its own transaction."""
        try:
            outcomes = import_each(paths, ImportOptions.from_command(options))
        except ValueError as exc:
            raise bad_input(exc) from None
        failed = [o for o in outcomes if o.failed]
        if options["json"]:
            print_json(self, [
                {"file": str(o.path), "ok": not o.failed, "error": o.error or None,
                 "result": o.result.as_dict() if o.result else None}
                for o in outcomes
            ])  # fmt: skip
        for outcome in outcomes:
            if outcome.result is not None:
                warn(self, outcome.result.warnings)
                if not options["json"]:
                    self.stdout.write(f"{outcome.path}: " + "\n".join(import_lines(outcome.result)))
            else:
                self.stderr.write(f"FAILED {outcome.error}")
        if not options["json"]:
            self.stdout.write(f"{len(outcomes) - len(failed)} of {len(outcomes)} file(s) imported")
        if failed:
            raise CommandError(f"{len(failed)} of {len(outcomes)} file(s) failed", returncode=1)

    def _validity(self, options: dict[str, Any]) -> None:
        if options["invalidate"] is not None and options["revalidate"] is not None:
            raise CommandError("give --invalidate or --revalidate, not both", returncode=2)
        if options["ledgers"]:
            raise CommandError("--invalidate / --revalidate take no files", returncode=2)
        try:
            if options["invalidate"] is not None:
                run = validity.invalidate(options["invalidate"], options["reason"])
                self.stdout.write(f"run #{run.pk} marked invalid: {run.invalid_reason}")
            else:
                run = validity.revalidate(options["revalidate"], options["reason"])
                self.stdout.write(f"run #{run.pk} valid again")
        except ValueError as exc:
            raise bad_input(exc) from None

