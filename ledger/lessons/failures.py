"""The failed simulations of a τ² results.json, with their conversations, for
learning. The file is checked by the ledger's own reader first (one line
naming the file on anything wrong); a second streaming pass then yields the
failed simulations one at a time, so memory holds one conversation, never the
file. Nothing read here is stored: conversations go to the judge and the leak
guard, then are dropped."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ijson

from ledger.benchmarks.tau2.results import Tau2Results, read_results


@dataclass(frozen=True)
class Failure:
    item_id: str  # <task>#<trial>
    reward: float
    messages: list[dict[str, Any]]
    reward_info: dict[str, Any]
    criteria: dict[str, Any] | None = None  # the task's evaluation_criteria: the ground truth


def failed_item_ids(results: Tau2Results) -> list[str]:
    """Evaluated, not correct, and not a skipped sample (a failed model call is no lesson)."""
    return [s.item_id for s in results.simulations if s.reward is not None and not s.correct and not s.skipped]


def task_criteria(path: Path) -> dict[str, dict[str, Any]]:
    """Each task's evaluation_criteria (its expected actions), by task id."""
    out: dict[str, dict[str, Any]] = {}
    with open(path, "rb") as raw:
        for task in ijson.items(raw, "tasks.item", use_float=True):
            if isinstance(task, dict) and isinstance(task.get("evaluation_criteria"), dict):
                out[str(task.get("id"))] = task["evaluation_criteria"]
    return out


def failures(path: Path, wanted: set[str]) -> Iterator[Failure]:
    """The simulations named in `wanted` that hold a conversation, in file order,
    each with its task's evaluation criteria."""
    criteria = task_criteria(path)
    with open(path, "rb") as raw:
        for sim in ijson.items(raw, "simulations.item", use_float=True):
            task, trial = sim.get("task_id"), sim.get("trial", 0)
            item_id = f"{task}#{trial}"
            messages = sim.get("messages")
            if item_id not in wanted or not isinstance(messages, list) or not messages:
                continue
            info = sim.get("reward_info") if isinstance(sim.get("reward_info"), dict) else {}
            yield Failure(item_id, float(info.get("reward") or 0.0), messages, info, criteria.get(str(task)))


def read(path: str | Path, *, progress: bool | None = None) -> tuple[Tau2Results, list[str]]:
    """The run as the ledger reads it, and its failed item ids."""
    results = read_results(path, progress=progress)
    return results, failed_item_ids(results)
