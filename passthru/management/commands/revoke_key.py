from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from passthru.auth import KEY_REFRESH_SECONDS, KeyRefused, revoke_key


class Command(BaseCommand):
    help = "Revoke a key made with create_key (every server refuses it within a few seconds)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            revoke_key(options["name"])
        except KeyRefused as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Revoked key {options['name']!r}: refused within {KEY_REFRESH_SECONDS:g} s on every server.")
