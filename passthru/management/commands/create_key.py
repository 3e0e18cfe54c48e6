from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from passthru.auth import KeyRefused, create_key


class Command(BaseCommand):
    help = (
        "Make a Marina key for /v1 and print its secret once (only its SHA-256 is stored). "
        "NAME is what the ledger and the reports show for this key's calls."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="1 to 64 letters, digits or . _ @ -")
        parser.add_argument(
            "--read-all",
            action="store_true",
            help="the key reads every key's traces and spend at /api (without it: only its own)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            secret = create_key(options["name"], reads_all=options["read_all"])
        except KeyRefused as exc:
            raise CommandError(str(exc)) from None
        self.stderr.write(
            f"Made key {options['name']!r}. Its secret is printed once, below; Marina keeps only its hash.\n"
            "Call /v1 with: Authorization: Bearer <secret>. Revoke it with: manage.py revoke_key "
            f"{options['name']}",
            style_func=self.style.SUCCESS,  # stderr keeps stdout to the secret alone; a success, not an error's red
        )
        self.stdout.write(secret)
