"""The original Marina's ledger file: the harness-result shape its `tau2 convert`
wrote and its `benchmark:import` read (reference-behaviour §5.2):

    {"config": {"dataset", "model", "seed", "judge": {"model"}, "tau2Commit", "trials", ...},
     "timestamp": <ms epoch>, "duration_ms": <sum of durations>,
     "items": [{"id": "<task>#<trial>", "correct", "score", "latencyMs", "usage": {"costUsd"}}]}

`to_original` writes it from a ledger; `from_original` reads one back. The
original allowed extra keys in `config` and in items, and Marina uses them to
carry what the original shape has no place for (the user simulator, the split,
per-item termination reason, agent and user cost, the conversation hashes
that link items to traces, the τ² file's SHA-256), so a file Marina writes
round-trips with every figure identical; a file the original wrote reads with
what it has. Credential-named keys are dropped at any depth either way."""
from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from ledger.benchmarks import checks
from ledger.benchmarks.credentials import WARNING, credential_paths, strip_secrets
from ledger.benchmarks.errors import LedgerInputError
from ledger.benchmarks.items import INFRA_ERROR, LedgerItem, LedgerRun, Participant
from ledger.benchmarks.ledgerfile import Ledger
from ledger.benchmarks.tau2.results import parse_time

_ITEM_ID = re.compile(r"^(.+)#(\d+)$")
_USER_IN_JUDGE = re.compile(r"; user (\S+)$")


def is_original(data: Any) -> bool:
    """The harness-result shape: a `config` object and `items`, no Marina `format`."""
    return isinstance(data, dict) and "format" not in data and isinstance(data.get("config"), dict) and "items" in data


def to_original(ledger: Ledger) -> dict[str, Any]:
    """The original's file for a ledger: its fields as its τ² adapter filled
    them, plus Marina's extra keys (camelCase, as the original's own)."""
    run = ledger.run
    user = run.user.model or "unknown"
    moment = parse_time(run.timestamp) or parse_time(run.started_at)
    config: dict[str, Any] = {
        "dataset": run.benchmark,
        "model": run.agent.model or "unknown",
        "judge": {"model": run.judge or f"tau2 official evaluator; user {user}"},
        "tau2Commit": run.tau2.get("git_commit", ""),
        "trials": run.num_trials,
        # Marina's extras: what the original shape has no place for.
        "domain": run.domain,
        "agent": _participant_out(run.agent),
        "user": _participant_out(run.user),
        "taskSplit": run.task_split,
        "maxSteps": run.max_steps,
        "maxErrors": run.max_errors,
        "tau2": run.tau2,
        "taskIds": run.task_ids,
        "harnessTimestamp": run.timestamp,
        "startedAt": run.started_at,
        "endedAt": run.ended_at,
    }
    if run.retrieval_config is not None:
        config["retrievalConfig"] = run.retrieval_config
        config["retrievalConfigKwargs"] = strip_secrets(run.retrieval_config_kwargs)
    if run.seed is not None:
        config["seed"] = run.seed
    return {
        "config": config,
        "timestamp": int(moment.timestamp() * 1000) if moment else None,
        "duration_ms": round(sum(i.duration_s or 0.0 for i in ledger.items) * 1000),
        "source": ledger.source,
        "items": [_item_out(i) for i in ledger.items],
    }


def _participant_out(p: Participant) -> dict[str, Any]:
    return {"llm": p.llm, "model": p.model, "implementation": p.implementation, "args": strip_secrets(p.args)}


def _item_out(i: LedgerItem) -> dict[str, Any]:
    out: dict[str, Any] = {"id": i.id, "correct": i.correct, "score": i.reward if i.reward is not None else 0}
    if i.duration_s is not None:
        out["latencyMs"] = round(i.duration_s * 1000)
    if i.agent_cost_usd is not None or i.user_cost_usd is not None:
        out["usage"] = {"costUsd": (i.agent_cost_usd or 0.0) + (i.user_cost_usd or 0.0)}
    if i.infra_error:
        # The original's mark for an answer that never came; Marina's extra says why.
        out["fallback"] = True
    out.update(
        {
            "taskId": i.task_id,
            "trial": i.trial,
            "terminationReason": i.termination_reason,
            "skipped": i.skipped,
            "durationS": i.duration_s,  # latencyMs is rounded to the millisecond
            "agentCostUsd": i.agent_cost_usd,
            "userCostUsd": i.user_cost_usd,
            "startTime": i.start_time,
            "endTime": i.end_time,
            "rewardBreakdown": i.reward_breakdown,
            "seed": i.seed,
            "openingAgent": i.opening_agent,
            "openingUser": i.opening_user,
        }
    )
    return out


def from_original(name: str, data: dict[str, Any]) -> Ledger:
    """A ledger from the original's file (validated; LedgerInputError naming the file)."""

    def bad(problem: str) -> LedgerInputError:
        return LedgerInputError(name, problem)

    warnings = [f"{name}: {WARNING}"] if next(credential_paths(data), None) is not None else []
    data = strip_secrets(data)
    config = data["config"]
    dataset = config.get("dataset") or config.get("name")
    if not isinstance(dataset, str) or not dataset:
        raise bad("not a ledger file: `config.dataset` is missing")
    raw_items = data.get("items")
    if not isinstance(raw_items, list):
        raise bad("not a ledger file: `items` is not a list")
    if not raw_items:
        raise bad("holds no items")
    items: list[LedgerItem] = []
    seen: set[str] = set()
    for n, raw in enumerate(raw_items, 1):
        item = _item_in(raw, n, bad)
        if item.id in seen:
            raise bad(f"item {item.id} appears twice")
        seen.add(item.id)
        items.append(item)

    trials = checks.whole(bad, "config", "trials", checks.whole_or_none(config.get("trials")) or None)
    if trials is None or trials < 1:
        trials = max(i.trial for i in items) + 1
    judge = config.get("judge")
    judge_text = ""
    if isinstance(judge, dict) and isinstance(judge.get("model"), str):
        judge_text = judge["model"] + (f" @ {judge['endpoint']}" if isinstance(judge.get("endpoint"), str) else "")
    model = config.get("model") if isinstance(config.get("model"), str) else ""
    agent = _participant_in(config.get("agent"), model)
    found = _USER_IN_JUDGE.search(judge_text)
    user = _participant_in(config.get("user"), found.group(1) if found else "")
    started, ended = checks.text_or_none(config.get("startedAt")), checks.text_or_none(config.get("endedAt"))
    if started is None and isinstance(data.get("timestamp"), (int, float)) and not isinstance(data["timestamp"], bool):
        begin = datetime.fromtimestamp(data["timestamp"] / 1000, UTC)
        started = begin.isoformat()
        duration = _num(data.get("duration_ms")) or 0.0
        ended = (begin + timedelta(milliseconds=duration)).isoformat()
    tau2 = config.get("tau2") if isinstance(config.get("tau2"), dict) else {}
    tau2 = {k: v for k, v in tau2.items() if isinstance(v, str)}
    if isinstance(config.get("tau2Commit"), str):
        tau2.setdefault("git_commit", config["tau2Commit"])
    # The original adapter's judge text is a description, not a judge someone chose: not kept.
    chosen_judge = "" if judge_text.startswith("tau2 official evaluator") else judge_text
    run = LedgerRun(
        benchmark=dataset,
        domain=checks.text_or_none(config.get("domain")) or dataset.removeprefix("tau2-"),
        num_trials=trials,
        agent=agent,
        user=user,
        task_split=checks.text_or_none(config.get("taskSplit")),
        seed=checks.whole(bad, "config", "seed", config.get("seed"), low=-checks.MAX_SEED, high=checks.MAX_SEED),
        max_steps=checks.whole_or_none(config.get("maxSteps")),
        max_errors=checks.whole_or_none(config.get("maxErrors")),
        tau2=tau2,
        timestamp=checks.text_or_none(config.get("harnessTimestamp")),
        started_at=started,
        ended_at=ended,
        task_ids=[str(t) for t in config["taskIds"]] if isinstance(config.get("taskIds"), list) else None,
        judge=chosen_judge,
        retrieval_config=checks.text_or_none(config.get("retrievalConfig")),
        retrieval_config_kwargs=config["retrievalConfigKwargs"] if isinstance(config.get("retrievalConfigKwargs"), dict) else {},
    )
    source: dict[str, Any] = data["source"] if isinstance(data.get("source"), dict) else {}
    return Ledger(run=run, items=items, source={**source, "format": "original"}, warnings=warnings)


def _item_in(raw: Any, n: int, bad: Any) -> LedgerItem:
    if not isinstance(raw, dict):
        raise bad(f"item {n} is not a JSON object")
    item_id = raw.get("id")
    if not isinstance(item_id, str) or not item_id:
        raise bad(f"item {n} has no id")
    task_id, trial = checks.text_or_none(raw.get("taskId")), checks.whole_or_none(raw.get("trial"))
    if task_id is None or trial is None:
        found = _ITEM_ID.match(item_id)
        task_id, trial = (found.group(1), int(found.group(2))) if found else (item_id, 0)
    if f"{task_id}#{trial}" != item_id:
        raise bad(f"item {n}: id {item_id!r} is not <task>#<trial> ({task_id}#{trial})")
    checks.whole(bad, f"item {n}", "trial", trial)
    correct, score = raw.get("correct"), raw.get("score")
    if not isinstance(correct, bool):
        raise bad(f"item {n} has no true/false `correct`")
    if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
        raise bad(f"item {n} has a score that is not a number")
    reason = checks.text_or_none(raw.get("terminationReason")) or ""
    infra = reason == INFRA_ERROR
    where = f"item {n}"
    # Marina recomputes `correct` from the score (τ²'s rule), as for its own files.
    score = checks.reward(bad, where, "score", score)
    reward = None if infra else score if score is not None else (1.0 if correct else 0.0)
    agent_cost = checks.cost(bad, where, "agentCostUsd", raw.get("agentCostUsd"))
    user_cost = checks.cost(bad, where, "userCostUsd", raw.get("userCostUsd"))
    usage = raw.get("usage")
    if agent_cost is None and user_cost is None and isinstance(usage, dict) and usage.get("costUsd") is not None:
        # The original keeps one cost per item: read as the agent's, the user simulator's as 0.
        agent_cost, user_cost = checks.cost(bad, where, "usage.costUsd", usage.get("costUsd")), 0.0
    latency = checks.number(
        bad, where, "latencyMs", raw.get("latencyMs"), low=0, high=checks.MAX_DURATION_S * 1000, what="a latency in ms"
    )
    return LedgerItem(
        id=item_id,
        task_id=task_id,
        trial=trial,
        reward=reward,
        termination_reason=reason,
        infra_error=infra,
        skipped=raw.get("skipped") is True,
        duration_s=checks.duration(bad, where, "durationS", raw.get("durationS"))
        if raw.get("durationS") is not None
        else (None if latency is None else latency / 1000),
        agent_cost_usd=agent_cost,
        user_cost_usd=user_cost,
        start_time=checks.time(bad, where, "startTime", raw.get("startTime")),
        end_time=checks.time(bad, where, "endTime", raw.get("endTime")),
        reward_breakdown=raw["rewardBreakdown"] if isinstance(raw.get("rewardBreakdown"), dict) else {},
        seed=checks.whole(bad, where, "seed", raw.get("seed"), low=-checks.MAX_SEED, high=checks.MAX_SEED),
        opening_agent=checks.opening_hash(raw.get("openingAgent")),
        opening_user=checks.opening_hash(raw.get("openingUser")),
    )


def _participant_in(raw: Any, model: str) -> Participant:
    raw = raw if isinstance(raw, dict) else {}
    llm = checks.text_or_none(raw.get("llm")) or model
    return Participant(
        llm=llm,
        model=checks.text_or_none(raw.get("model")) or model or llm.removeprefix("openai/"),
        implementation=checks.text_or_none(raw.get("implementation")) or "",
        args=raw["args"] if isinstance(raw.get("args"), dict) else {},
    )


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)
