from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger import demo_arms
from ledger.demo import load_demo, remove_demo


class Command(BaseCommand):
    help = (
        "Load demo data so the report pages and the admin show something on a fresh machine: τ² runs in two "
        "groups (demo:airline-plain, demo:airline-verify) and a day of synthetic traffic from the scripted "
        "provider `demo` (keys demo-…). Loading again replaces it; --remove deletes it and nothing else."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--remove", action="store_true", help="delete the demo data and exit")
        parser.add_argument("--days", type=int, default=1, help="days of traffic ending now (1 to 30; default 1)")
        parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic traffic (default 0)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["remove"]:
            gone = remove_demo()
            self.stdout.write(
                f"Removed the demo data: {gone.runs} runs, {gone.traces} traces, {gone.spans} spans, "
                f"{gone.spend_rows} daily spend rows."
            )
            return
        if not 1 <= options["days"] <= 30:
            raise CommandError(f"--days must be between 1 and 30, not {options['days']}")
        made = load_demo(days=options["days"], seed=options["seed"])
        self.stdout.write(
            f"Loaded demo data: {made.runs} runs ({made.items} items) in groups demo:airline-plain, "
            f"demo:airline-verify, demo:airline-mini, demo:airline-local and demo:retail-plain, each item linked to "
            f"its calls; a running experiment ({demo_arms.EXPERIMENT}); {made.traces} traces with {made.spans} spans "
            f"and {made.spend_rows} daily spend rows from the scripted provider `demo`.\n"
            "Open http://127.0.0.1:3300/reports/ (make a user with manage.py createsuperuser); "
            "remove it with: manage.py demo --remove"
        )
