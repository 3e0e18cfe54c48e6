from __future__ import annotations

import json
from datetime import date
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kernel import money
from ledger.reports.frontier import FrontierError, as_json, frontier


def _day(value: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise CommandError(f"not a UTC day (YYYY-MM-DD): {value!r}") from None


class Command(BaseCommand):
    help = (
        "The cost–reward frontier of a benchmark: each run (or group) with Marina's spend per evaluated simulation "
        "(unknown when its calls were not all linked and priced), pass^k with its 95 % interval over tasks, and "
        "whether it is on the Pareto frontier. The same figures as /reports/frontier/ and /api/frontier."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--benchmark", default="", help="e.g. tau2-airline (default: the one with the most runs)")
        parser.add_argument("--domain", default="")
        parser.add_argument("--group", default="")
        parser.add_argument("--since", type=_day, help="imported on or after (UTC day)")
        parser.add_argument("--until", type=_day, help="imported on or before (UTC day)")
        parser.add_argument("--k", type=int, default=1, help="pass^k's k (default 1)")
        parser.add_argument("--by", choices=["run", "group"], default="run")
        parser.add_argument("--limit", type=int, help="the newest this many runs (default 100) or groups (default 20)")
        parser.add_argument("--json", action="store_true", help="print /api/frontier's JSON")

    def handle(self, *args: Any, **o: Any) -> None:
        if o["since"] and o["until"] and o["since"] > o["until"]:
            raise CommandError("--since is after --until")
        try:
            result = frontier(benchmark=o["benchmark"], domain=o["domain"], group=o["group"], since=o["since"],
                              until=o["until"], k=o["k"], by=o["by"], limit=o["limit"])  # fmt: skip
        except FrontierError as exc:
            raise CommandError(str(exc)) from None
        if o["json"]:
            self.stdout.write(json.dumps(as_json(result), indent=2))
            return
        self.stdout.write(f"{result.benchmark or 'no runs'}: pass^{result.k}, a point per {result.by}, "
                          f"{len(result.points)} of {result.total} shown")  # fmt: skip
        if result.cohort:
            self.stdout.write(f"frontier over points of {result.cohort}; others shown apart with the reason")
        width = max((len(p.label) for p in result.points), default=10)
        for p in sorted(result.points, key=lambda p: (p.cost_per_simulation_nanousd is None, p.cost_per_simulation_nanousd or 0)):
            cost = "unknown" if p.cost_per_simulation_nanousd is None else money.dollars(p.cost_per_simulation_nanousd)
            value = "—" if p.value is None else f"{p.value:.3f} [{p.lo:.3f}, {p.hi:.3f}]"
            mark = " *frontier*" if p.on_frontier else (f"  apart: {p.apart}" if p.apart else "")
            self.stdout.write(f"  {p.label:<{width}}  {cost:>14}/sim  {value}  n={p.simulations}  ({p.cost_basis}){mark}")
