"""What a running τ² run has done so far, read from its incrementally saved
results file: simulations evaluated and passed per task, infrastructure errors,
when τ² was started (the tracker is made as it starts), and when the first and
the latest were seen (the experiment page's pace and ETA, ledger/reports/live.py:
from the start, since the first saved simulation already took a whole
simulation's time, or a batch's under --max-concurrency).

τ² rewrites its results file as simulations finish; a read that catches it
half-written is not JSON: `read` then returns None and the last figures stand."""
from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ledger.benchmarks.metrics import is_successful
from ledger.benchmarks.tau2.results import INFRA_ERROR


class Tracker:
    def __init__(self, planned: int | None) -> None:
        self.planned = planned
        self.started_at = datetime.now(UTC).isoformat()
        self.first_at: str | None = None
        self.last: tuple[int, dict[str, Any] | None] = (-1, None)

    def update(self, results: Path, done: int) -> dict[str, Any] | None:
        """`read`, parsed again only when τ² has saved another simulation (a results file with
        conversations is tens of MB); None while nothing is saved or the file was caught half-written."""
        if done and done != self.last[0]:
            progress = self.read(results)
            if progress is not None:
                self.last = (done, progress)
                return progress
        return None

    def read(self, results: Path) -> dict[str, Any] | None:
        try:
            data = json.loads(results.read_bytes())
        except (OSError, ValueError):
            return None
        simulations = data.get("simulations") if isinstance(data, dict) else None
        if not isinstance(simulations, list):
            return None
        per_task: dict[str, list[int]] = {}
        evaluated = passed = infra = 0
        for sim in simulations:
            if not isinstance(sim, dict):
                continue
            if sim.get("termination_reason") == INFRA_ERROR:
                infra += 1
                continue
            info = sim.get("reward_info")
            reward = info.get("reward") if isinstance(info, dict) else None
            ok = is_successful(reward if isinstance(reward, (int, float)) else None)
            cell = per_task.setdefault(str(sim.get("task_id")), [0, 0])
            cell[0] += ok
            cell[1] += 1
            evaluated += 1
            passed += ok
        now = datetime.now(UTC).isoformat()
        if self.first_at is None:
            self.first_at = now
        return {"evaluated": evaluated, "passed": passed, "infra_errors": infra, "per_task": per_task,
                "planned": self.planned, "started_at": self.started_at, "first_at": self.first_at,
                "updated_at": now}  # fmt: skip


def bars(experiment: Any, budget_nanousd: int | None) -> list[str]:
    """One progress bar per arm, the figures the experiment page shows."""
    from ledger.reports import live

    progress = live.experiment_progress(experiment)
    return [live.bar(arm, budget_nanousd) for arm in progress.arms]
