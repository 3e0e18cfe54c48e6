from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from ledger.spend.services import listed


class Command(BaseCommand):
    help = "The keys made with create_key: name, the secret's first characters, created, revoked."

    def handle(self, *args: Any, **options: Any) -> None:
        rows = listed()
        if not rows:
            self.stdout.write("No keys made with create_key (keys in MODEL_API_KEYS are not listed).")
        for key in rows:
            revoked = f"revoked {key.revoked_at:%Y-%m-%d %H:%M} UTC" if key.revoked_at else "active"
            self.stdout.write(
                f"{key.name:<32} {key.prefix}…  created {key.created_at:%Y-%m-%d %H:%M} UTC  {revoked}"
                + ("  reads all" if key.reads_all else "")
            )
