from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ledger.benchmarks.cli import bad_input
from ledger.benchmarks.tau2.scrub import scrub


class Command(BaseCommand):
    help = (
        "Write a copy of a τ² results.json with every credential removed (values of api_key, token, "
        "authorization... keys at any depth, and key-shaped strings), safe to share. "
        "Default output: <name>.scrubbed.json beside it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("results", help="τ² results.json")
        parser.add_argument("--out", help="where to write the copy (default: <name>.scrubbed.json)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            result = scrub(options["results"], options["out"])
        except ValueError as exc:
            raise bad_input(exc) from None
        # The full path: by default the copy lands beside the input, which a relative
        # argument leaves the reader to work out.
        self.stdout.write(
            f"wrote {Path(result.out).resolve()} ({result.keys_redacted} credential value(s) removed, "
            f"{result.strings_redacted} string(s) with a key-shaped value masked)"
        )
