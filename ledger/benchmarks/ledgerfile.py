"""The ledger JSON file: what `tau2_convert` writes and `benchmark_import`
reads. Format "marina-ledger", version 1; documented in docs/ledger-format.md.

It carries a run's metadata and one item per simulation, never a conversation
and never a credential: credential-named keys are removed at any depth both
when a file is written and when one is read (a hand-edited file could carry
one)."""
from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ledger.benchmarks import checks, metrics
from ledger.benchmarks.board import assess
from ledger.benchmarks.credentials import WARNING, credential_paths, strip_secrets
from ledger.benchmarks.errors import LedgerInputError
from ledger.benchmarks.items import INFRA_ERROR, LedgerItem, LedgerRun, Participant

FORMAT = "marina-ledger"
VERSION = 1
@dataclass
class Ledger:
    run: LedgerRun
    items: list[LedgerItem]
    source: dict[str, Any] = field(default_factory=dict)  # kind, name, sha256, bytes
    warnings: list[str] = field(default_factory=list)  # not written; for the caller to show
    # Each task's expected actions, from τ²'s results (not written): the order pass^k is summed
    # in, as τ² sums it; a file read back sums in task-id order, bit-equal whenever the two agree.
    num_actions: dict[str, int] = field(default_factory=dict)

    @property
    def infra_errors(self) -> int:
        return sum(1 for i in self.items if i.infra_error)

    @property
    def skipped(self) -> int:
        return sum(1 for i in self.items if i.skipped)

    def summary(self) -> metrics.Summary:
        return metrics.summarize(self.items, self.num_actions)

    def to_dict(self) -> dict[str, Any]:
        """The file's content. `summary` and `comparability` are there for
        readers; the importer recomputes both from the items and the run."""
        summary = self.summary()
        verdict = assess(self.run, self.items)
        run = asdict(self.run)
        for side in ("agent", "user"):
            run[side]["args"] = strip_secrets(run[side]["args"])
        run["retrieval_config_kwargs"] = strip_secrets(run["retrieval_config_kwargs"])
        run["simulations"] = len(self.items)
        run["infra_errors"] = self.infra_errors
        run["skipped"] = self.skipped
        return {
            "format": FORMAT,
            "version": VERSION,
            "source": self.source,
            "run": run,
            "summary": {
                "evaluated": summary.simulations,
                "tasks": summary.tasks,
                "mean_reward": summary.mean_reward,
                "pass_hat_k": summary.pass_hat_k,
            },
            "comparability": {"comparable": verdict.comparable, "reasons": verdict.reasons},
            "items": [{**asdict(i), "correct": i.correct} for i in self.items],
        }


def write_ledger(ledger: Ledger, path: str | Path) -> None:
    """Write atomically (temp file + rename), so a failed write leaves no file."""
    write_json(ledger.to_dict(), path)


def write_json(data: dict[str, Any], path: str | Path) -> None:
    """Write one-space-indented JSON atomically (temp file + rename)."""
    path = Path(path)
    text = json.dumps(data, indent=1, ensure_ascii=False)
    fd, tmp = tempfile.mkstemp(dir=path.parent if str(path.parent) else ".", prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_ledger(source: str | Path | dict[str, Any]) -> Ledger:
    """A ledger from a file path or already-parsed data, validated.

    Raises LedgerInputError naming the file and the problem."""
    name, data = load_json(source)
    return from_data(name, data)


def load_json(source: str | Path | dict[str, Any]) -> tuple[str, Any]:
    """(name, parsed JSON) of a ledger file, or of data parsed already.
    Raises LedgerInputError naming the file and the problem."""
    if isinstance(source, dict):
        name, data = "<ledger data>", source
    else:
        name = str(source)
        try:
            raw = Path(source).read_bytes()
        except OSError as exc:
            raise LedgerInputError(name, f"cannot read: {exc.strerror}") from None
        try:
            data = json.loads(raw, parse_constant=_not_json_number, parse_float=_finite_float)
        except _NotANumber as exc:
            raise LedgerInputError(name, f"not JSON: {exc}") from None
        except UnicodeDecodeError:
            raise LedgerInputError(name, "not JSON (not UTF-8 text)") from None
        except json.JSONDecodeError as exc:
            if not raw.strip():
                raise LedgerInputError(name, "empty file, not JSON") from None
            if exc.pos >= len(raw.rstrip()) - 1:
                raise LedgerInputError(name, "truncated: the JSON ends early") from None
            raise LedgerInputError(name, f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    return name, data


class _NotANumber(ValueError):
    pass


def _not_json_number(token: str) -> float:
    # Python's json reads NaN and Infinity; JSON has neither, and no database column takes them.
    raise _NotANumber(f"{token} is not a JSON number")


def _finite_float(token: str) -> float:
    value = float(token)
    if not math.isfinite(value):
        raise _NotANumber("a number too large for a double")
    return value


def from_data(name: str, data: Any) -> Ledger:
    def bad(problem: str) -> LedgerInputError:
        return LedgerInputError(name, problem)

    if not isinstance(data, dict):
        raise bad("not a ledger file: the top level is not a JSON object")
    if data.get("format") != FORMAT:
        if "simulations" in data and "info" in data:
            raise bad("this is a τ² results file, not a ledger file: use `tau2_convert` or `import_tau2`")
        raise bad(f'not a ledger file: "format" is not "{FORMAT}"')
    if data.get("version") != VERSION:
        version = data.get("version")
        shown = f" {version}" if isinstance(version, int) and not isinstance(version, bool) and abs(version) < 10**6 else ""
        raise bad(f"unsupported ledger version{shown}; this Marina reads version {VERSION}")
    warnings = [f"{name}: {WARNING}"] if next(credential_paths(data), None) is not None else []
    data = strip_secrets(data)
    run = data.get("run")
    if not isinstance(run, dict):
        raise bad("not a ledger file: no `run` object")
    benchmark, domain = run.get("benchmark"), run.get("domain")
    if not isinstance(benchmark, str) or not benchmark:
        raise bad("not a ledger file: `run.benchmark` is missing")
    num_trials = run.get("num_trials")
    if not isinstance(num_trials, int) or isinstance(num_trials, bool) or num_trials < 1:
        raise bad("not a ledger file: `run.num_trials` is not a positive whole number")
    checks.whole(bad, "run", "num_trials", num_trials, high=checks.MAX_INT)
    for key, high in (("seed", checks.MAX_SEED), ("max_steps", checks.MAX_INT), ("max_errors", checks.MAX_INT)):
        value = _opt(run.get(key), int)
        if value is not None and abs(value) > high:
            raise bad(f"run: {key} is out of range (at most {high})")
    items_raw = data.get("items")
    if not isinstance(items_raw, list):
        raise bad("not a ledger file: no `items` list")
    if not items_raw:
        raise bad("holds no items (no simulations)")
    items: list[LedgerItem] = []
    seen: set[str] = set()
    for n, raw in enumerate(items_raw, 1):
        item = _item(raw, n, bad)
        if item.id in seen:
            raise bad(f"{checks.simulation_name(n, item.task_id, item.trial, kind='item')} repeats an earlier item's id")
        seen.add(item.id)
        items.append(item)
    task_ids = run.get("task_ids")
    source = data.get("source") if isinstance(data.get("source"), dict) else {}
    return Ledger(
        run=LedgerRun(
            benchmark=benchmark,
            domain=domain if isinstance(domain, str) else benchmark.removeprefix("tau2-"),
            num_trials=num_trials,
            agent=_participant(run.get("agent")),
            user=_participant(run.get("user")),
            task_split=_opt(run.get("task_split"), str),
            seed=_opt(run.get("seed"), int),
            max_steps=_opt(run.get("max_steps"), int),
            max_errors=_opt(run.get("max_errors"), int),
            tau2={k: v for k, v in (run.get("tau2") or {}).items() if isinstance(v, str)}
            if isinstance(run.get("tau2"), dict)
            else {},
            timestamp=_opt(run.get("timestamp"), str),
            started_at=_opt(run.get("started_at"), str),
            ended_at=_opt(run.get("ended_at"), str),
            task_ids=[str(t) for t in task_ids] if isinstance(task_ids, list) else None,
            judge=_opt(run.get("judge"), str) or "",
            retrieval_config=_opt(run.get("retrieval_config"), str) or None,
            retrieval_config_kwargs=_opt(run.get("retrieval_config_kwargs"), dict) or {},
        ),
        items=items,
        source=source,
        warnings=warnings,
    )


def _item(raw: Any, n: int, bad: Any) -> LedgerItem:
    if not isinstance(raw, dict):
        raise bad(f"item {n} is not a JSON object")
    task_id, trial, reason = raw.get("task_id"), raw.get("trial"), raw.get("termination_reason")
    if not isinstance(task_id, str) or not task_id:
        raise bad(f"item {n} has no task_id")
    if not isinstance(trial, int) or isinstance(trial, bool) or trial < 0:
        raise bad(f"item {n} has no whole-number trial")
    if not isinstance(reason, str):
        raise bad(f"item {n} has no termination_reason")
    reward = raw.get("reward")
    if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))):
        raise bad(f"item {n} has a reward that is not a number")
    item_id = raw.get("id") if isinstance(raw.get("id"), str) else f"{task_id}#{trial}"
    where = checks.simulation_name(n, task_id, trial, kind="item")
    if item_id != f"{task_id}#{trial}":
        raise bad(f"{where}: id is not <task>#<trial>")
    checks.whole(bad, where, "trial", trial)
    infra = raw.get("infra_error") is True or reason == INFRA_ERROR
    return LedgerItem(
        id=item_id,
        task_id=task_id,
        trial=trial,
        reward=None if infra else checks.reward(bad, where, "reward", reward),
        termination_reason=reason,
        infra_error=infra,
        skipped=raw.get("skipped") is True,
        duration_s=checks.duration(bad, where, "duration_s", raw.get("duration_s")),
        agent_cost_usd=checks.cost(bad, where, "agent_cost_usd", raw.get("agent_cost_usd")),
        user_cost_usd=checks.cost(bad, where, "user_cost_usd", raw.get("user_cost_usd")),
        start_time=checks.time(bad, where, "start_time", raw.get("start_time")),
        end_time=checks.time(bad, where, "end_time", raw.get("end_time")),
        reward_breakdown=raw["reward_breakdown"] if isinstance(raw.get("reward_breakdown"), dict) else {},
        seed=checks.whole(bad, where, "seed", raw.get("seed"), low=-checks.MAX_SEED, high=checks.MAX_SEED),
        opening_agent=checks.opening_hash(raw.get("opening_agent")),
        opening_user=checks.opening_hash(raw.get("opening_user")),
    )


def _participant(raw: Any) -> Participant:
    raw = raw if isinstance(raw, dict) else {}
    llm = raw.get("llm") if isinstance(raw.get("llm"), str) else ""
    model = raw.get("model") if isinstance(raw.get("model"), str) else llm.removeprefix("openai/")
    return Participant(
        llm=llm,
        model=model,
        implementation=raw.get("implementation") if isinstance(raw.get("implementation"), str) else "",
        args=raw["args"] if isinstance(raw.get("args"), dict) else {},
    )


def _opt(value: Any, kind: type) -> Any:
    if kind is int and isinstance(value, bool):
        return None
    return value if isinstance(value, kind) else None
