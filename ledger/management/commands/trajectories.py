from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.reports.trajectories import TrajectoryError, as_json, side_by_side


class Command(BaseCommand):
    help = (
        "One task's simulation on two sides (runs or groups), turn by turn: messages when bodies were stored, "
        "else the calls made; formation interventions; cost per turn; τ²'s reward breakdown. The same figures as "
        "/reports/trajectories/ and /api/trajectories."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_a", nargs="?", type=int)
        parser.add_argument("run_b", nargs="?", type=int)
        parser.add_argument("--group", action="append", default=[], help="twice: group A, then group B")
        parser.add_argument("--task", required=True)
        parser.add_argument("--trial", type=int)
        parser.add_argument("--json", action="store_true", help="print /api/trajectories's JSON")

    def handle(self, *args: Any, **o: Any) -> None:
        groups = o["group"]
        if groups and (o["run_a"] is not None or len(groups) != 2):
            raise CommandError("give two runs, or --group twice")
        if not groups and (o["run_a"] is None or o["run_b"] is None):
            raise CommandError("give two runs, or --group twice")
        try:
            view = side_by_side(a=o["run_a"], b=o["run_b"], group_a=groups[0] if groups else "",
                                group_b=groups[1] if groups else "", task=o["task"], trial=o["trial"])  # fmt: skip
        except TrajectoryError as exc:
            raise CommandError(str(exc)) from None
        data = as_json(view)
        if o["json"]:
            self.stdout.write(json.dumps(data, indent=2))
            return
        for letter in ("a", "b"):
            s = data[letter]
            cost = "unknown" if s["cost_usd"] is None else f"${s['cost_usd']}"
            self.stdout.write(f"{letter.upper()}: run #{s['run_id']} {s['target']} item {s['item']}: {s['outcome']}, "
                              f"reward {s['reward']}, cost {cost}")  # fmt: skip
            for row in s["reward_breakdown"]:
                reward = "—" if row["reward"] is None else f"{row['reward']:.3f}"
                self.stdout.write(f"    {row['check']}: {row['result']} (reward {reward}{'' if row['counts'] else ', not counted'})")
            for t in s["turns"]:
                cost = "unknown" if t["cost_usd"] is None else f"${t['cost_usd']}"
                self.stdout.write(f"  turn {t['n']} {t['request_id']} {t['status']} {t['formation_label']} {cost}")
                for i in t["interventions"]:
                    self.stdout.write(f"    [{i['kind']}] {i['text'][:200]}")
                for m in t["messages"] or []:
                    calls = "; ".join(f"{c['name']}({c['arguments'][:80]})" for c in m["tool_calls"])
                    self.stdout.write(f"    {m['role']}: {m['text'][:200]}" + (f" -> {calls}" if calls else ""))
                if t["messages"] is None:
                    self.stdout.write("    calls: " + " -> ".join(f"{c['name']} {c['status']}" for c in t["calls"]))
                    for tool in t["tools"]:
                        named = ", ".join(tool["arguments"])
                        self.stdout.write(f"    tool {tool['name']}" + (f" arguments {named}" if named else "") + f" ({tool['check']})")
