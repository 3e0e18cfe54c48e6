"""A scripted, deterministic OpenAI-compatible upstream that plays both sides of a τ² airline run.

τ²'s CLI talks to two "models" through LiteLLM's OpenAI provider: the agent under test and the user
simulator. This server answers both, so the real, unmodified ``tau2 run`` can be driven end to end
on 127.0.0.1 without any real LLM:

* user side (body ``model`` ends with ``oracle-user``): finds the task by matching its system prompt
  (which embeds the task's user instructions) against τ²'s own ``tasks.json``, opens with the reason
  for the call plus a ``(ref airline/<id>)`` marker, and answers ``###STOP###`` once the agent replied.
* agent side (body ``model`` ends with ``oracle-agent``): replays the task's gold actions
  (``evaluation_criteria.actions``) as one tool call per turn, then sends a final text carrying every
  ``communicate_info`` string. For a seeded ``spoil_rate`` share of (task, trial) pairs it silently
  skips the last write action, so τ²'s DB check fails and the reward is 0.

Dual control (telecom's device tools, banking's user tools; sierra's τ²): the agent replays only the
actions whose ``requestor`` is the assistant; the user simulator, once the agent has answered, calls
the task's ``requestor: user`` actions one per turn with the tools τ² offers it, then stops. A
scripted user tells tasks apart only by their scenario: telecom's 114 base tasks share 15, so a run
loads only tasks whose scenarios differ (``task_ids``). Where τ² offers a ``KB_search*`` tool
(banking_knowledge), the agent searches once before acting, so a dense retrieval config embeds a
query; ``/v1/embeddings`` answers with deterministic vectors (a hash of each text).

Formation side calls (body ``model`` ends with ``oracle-ledger``, for a server whose
``MARINA_OBLIGATIONS_MODEL`` / ``MARINA_ARGCHECK_MODEL`` name it): the obligations extraction reads
nothing owed (``{"add": [], "cancel": []}``), the argument judge finds every value supported.

The trial is identified by the ``seed`` in the body (τ² sends one seed per trial in every request).
Stdlib only. Run: ``python tests/e2e/tau2_oracle.py --port 8765 [--spoil-rate 0.25] [--spoil-seed S]``.
"""

from __future__ import annotations

import argparse
import base64
import glob
import hashlib
import json
import os
import re
import struct
import threading
import time
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

Json = dict[str, Any]

# Airline tools that change the database (τ²'s ToolType.WRITE); everything else is a lookup.
AIRLINE_WRITE_TOOLS = frozenset(
    {
        "book_reservation",
        "cancel_reservation",
        "send_certificate",
        "update_reservation_baggages",
        "update_reservation_flights",
        "update_reservation_passengers",
    }
)
STOP = "###STOP###"
DONE_MARKER = "[oracle:done]"
REF_RE = re.compile(r"\(ref (\w+)/(\S+?)\)(?:\s|$)")  # telecom's ids hold [ ] | and :
EMBEDDING_DIMENSIONS = 16
# The openings of Marina's formation prompts (passthru/formations/*/prompts.py; this module stays
# stdlib-only, tests/e2e/test_repro_tau2.py checks they still match).
LEDGER_EXTRACT = "You keep the obligations ledger"
ARGCHECK_JUDGE = "You check the arguments of a tool call"
TASKS_RELPATH = "tau2/data/tau2/domains/airline/tasks.json"


def find_tasks_file(tau2_venv: str | os.PathLike[str] | None = None) -> Path:
    """Locate τ²'s airline tasks.json: $TAU2_TASKS_FILE, else inside the tau2 venv's site-packages.

    The venv defaults to $MARINA_TAU2_VENV, then ~/.cache/marina/tau2-venv (as .ci/install-tau2).
    """
    explicit = os.environ.get("TAU2_TASKS_FILE")
    if explicit:
        return Path(explicit)
    venv = Path(
        tau2_venv
        or os.environ.get("MARINA_TAU2_VENV")
        or Path.home() / ".cache/marina/tau2-venv"
    )
    hits = sorted(glob.glob(str(venv / "lib/python3*/site-packages" / TASKS_RELPATH)))
    if not hits:
        raise FileNotFoundError(f"no {TASKS_RELPATH} under {venv}; run .ci/install-tau2 first")
    return Path(hits[-1])


def _squash(text: str) -> str:
    """Whitespace-free form: τ² re-indents the instructions when it renders the user's prompt."""
    return re.sub(r"\s+", "", text)


@dataclass(frozen=True)
class Task:
    id: str
    actions: list[Json]  # [{"name", "arguments", ...}] in gold order
    communicate_info: list[str]
    instructions: Json  # user_scenario.instructions (structured form)

    @property
    def agent_actions(self) -> list[Json]:
        return [a for a in self.actions if a.get("requestor", "assistant") != "user"]

    @property
    def user_actions(self) -> list[Json]:
        return [a for a in self.actions if a.get("requestor") == "user"]

    @property
    def opening(self) -> str:
        ins = self.instructions
        return f"Hi! {ins['reason_for_call']} {ins.get('known_info') or ''}".strip()

    def matches_user_prompt(self, squashed_prompt: str) -> bool:
        parts = [self.instructions.get(k) for k in ("reason_for_call", "known_info", "task_instructions")]
        return all(_squash(p) in squashed_prompt for p in parts if p)

    def rendered(self) -> str:
        """Squashed tail of τ²'s rendering (StructuredUserInstructions.__str__ inside <scenario>).

        Needed because some tasks' instructions are substrings of others' (airline 16 vs 15).
        """
        ins = self.instructions
        labelled = [("Reason for call:", ins.get("reason_for_call")), ("Known info:", ins.get("known_info")),
                    ("Unknown info:", ins.get("unknown_info")), ("Task instructions:", ins.get("task_instructions"))]
        return _squash("".join(f"{label}{text}" for label, text in labelled if text) + "</scenario>")


def load_tasks(path: str | os.PathLike[str], task_ids: Collection[str] | None = None) -> dict[str, Task]:
    """The tasks of τ²'s tasks.json (only `task_ids` when given: a scripted user tells apart only
    tasks whose scenarios differ)."""
    tasks: dict[str, Task] = {}
    for raw in json.loads(Path(path).read_text()):
        if task_ids is not None and str(raw["id"]) not in task_ids:
            continue
        criteria = raw.get("evaluation_criteria") or {}
        instructions = raw["user_scenario"]["instructions"]
        if isinstance(instructions, str):  # unstructured form: keep it matchable all the same
            instructions = {"reason_for_call": instructions}
        tasks[str(raw["id"])] = Task(
            id=str(raw["id"]),
            actions=list(criteria.get("actions") or []),
            communicate_info=[str(s) for s in criteria.get("communicate_info") or []],
            instructions=instructions,
        )
    return tasks


def is_spoiled(task: Task, seed: int | None, spoil_rate: float, spoil_seed: int) -> bool:
    """Deterministic per-(task, trial) coin: sha256 of (spoil_seed, task id, trial seed).

    Only tasks with a write action can be spoiled (skipping a lookup would not change the DB), or,
    in a dual-control domain, a user action (the user then skips its last one: the device or the
    database ends in the wrong state).
    """
    writes = any(a["name"] in AIRLINE_WRITE_TOOLS for a in task.agent_actions)
    if spoil_rate <= 0 or not (writes or task.user_actions):
        return False
    digest = hashlib.sha256(f"{spoil_seed}:{task.id}:{seed}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < spoil_rate


def planned_actions(task: Task, spoiled: bool) -> list[Json]:
    actions = list(task.agent_actions)
    if spoiled and any(a["name"] in AIRLINE_WRITE_TOOLS for a in actions):
        last_write = max(i for i, a in enumerate(actions) if a["name"] in AIRLINE_WRITE_TOOLS)
        del actions[last_write]
    return actions


def _text(content: Any) -> str:
    """Message content as text (OpenAI allows a list of parts)."""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def _estimate_tokens(text: str) -> int:
    return max(1, len(text) // 4)


@dataclass
class Oracle:
    tasks: dict[str, Task]
    spoil_rate: float = 0.25
    spoil_seed: int = 0
    domain: str = "airline"
    report_cost: bool = True  # False: usage without a cost, like a provider Marina cannot price
    # Per upstream model name (e.g. "sure-oracle-agent"), a spoil rate that replaces spoil_rate: two
    # "models" of different skill, for a comparison whose answer is known.
    spoil_rates: dict[str, float] = field(default_factory=dict)
    requests: list[Json] = field(default_factory=list)  # every request body, in arrival order
    headers: list[dict[str, str]] = field(default_factory=list)  # their HTTP headers, same order
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, body: Json, headers: Mapping[str, str] | None = None) -> None:
        with self._lock:
            self.requests.append(body)
            self.headers.append(dict(headers or {}))

    def received(self) -> list[Json]:
        """A snapshot of the recorded request bodies (thread-safe)."""
        with self._lock:
            return list(self.requests)

    def spoiled(self, task_id: str, seed: int | None, model: str = "") -> bool:
        rate = self.spoil_rates.get(model, self.spoil_rate)
        return is_spoiled(self.tasks[task_id], seed, rate, self.spoil_seed)

    # --- the two roles ------------------------------------------------------------------------
    def reply(self, body: Json) -> Json:
        """The assistant message (``{"content", "tool_calls"}``) for a chat request."""
        model = str(body.get("model", ""))
        messages: list[Json] = body.get("messages") or []
        if model.endswith("oracle-user"):
            return self._user_turn(messages, _tool_names(body), body.get("seed"))
        if model.endswith("oracle-agent"):
            return self._agent_turn(messages, body.get("seed"), model, _tool_names(body))
        if model.endswith("oracle-ledger"):
            return self._ledger_turn(messages)
        raise ValueError(f"unknown model {model!r}: expected …oracle-agent, …oracle-user or …oracle-ledger")

    def _ledger_turn(self, messages: list[Json]) -> Json:
        system = " ".join(_text(m.get("content")) for m in messages if m.get("role") == "system")
        if system.startswith(ARGCHECK_JUDGE):
            return {"content": json.dumps({"supported": True})}
        if system.startswith(LEDGER_EXTRACT):
            return {"content": json.dumps({"add": [], "cancel": []})}
        raise ValueError("a ledger call the oracle does not play")

    def task_of(self, body: Json) -> str:
        """The id of the task a request belongs to, as the oracle itself tells (for tests)."""
        messages: list[Json] = body.get("messages") or []
        if str(body.get("model", "")).endswith("oracle-user"):
            return self._user_task(messages).id
        return self._identify_for_agent(messages).id

    def _user_task(self, messages: list[Json]) -> Task:
        system = " ".join(_text(m.get("content")) for m in messages if m.get("role") == "system")
        squashed = _squash(system)
        found = [t for t in self.tasks.values() if t.matches_user_prompt(squashed)]
        if len(found) > 1:
            found = [t for t in found if t.rendered() in squashed]
        if len(found) != 1:
            raise ValueError(f"user prompt matches {len(found)} tasks, expected exactly one")
        return found[0]

    def _user_turn(self, messages: list[Json], tools: Collection[str] = (), seed: int | None = None) -> Json:
        # τ² flips roles for its user simulator: the user's own earlier turns arrive as "assistant".
        task = self._user_task(messages)
        if not any(m.get("role") == "assistant" for m in messages):
            return {"content": f"{task.opening} (ref {self.domain}/{task.id})"}
        # Dual control: the task's own user actions, one per turn, with the tools τ² gave the user.
        issued = _tool_calls(messages)
        pending = [a for a in task.user_actions if a["name"] in tools]
        if pending and self.spoiled(task.id, seed) and not any(a["name"] in AIRLINE_WRITE_TOOLS for a in task.agent_actions):
            pending = pending[:-1]  # a spoiled trial: the user leaves its last action undone
        done = _replayed(issued, pending)
        if done < len(pending) and len(issued) < len(pending) + 3:
            return _call(pending[done]["name"], pending[done]["arguments"])
        return {"content": f"Thank you, that is all I needed. {STOP}"}

    def _identify_for_agent(self, messages: list[Json]) -> Task:
        user_texts = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
        for text in user_texts:
            ref = REF_RE.search(text)
            if ref and ref.group(2) in self.tasks:
                return self.tasks[ref.group(2)]
        # No marker (e.g. something in between rewrote the text): fall back to the opening line.
        squashed = [_squash(t) for t in user_texts]
        found = [t for t in self.tasks.values() if any(_squash(t.opening) in s for s in squashed)]
        if len(found) != 1:
            raise ValueError(f"agent conversation matches {len(found)} tasks, expected exactly one")
        return found[0]

    def _agent_turn(self, messages: list[Json], seed: int | None, model: str = "", tools: Collection[str] = ()) -> Json:
        task = self._identify_for_agent(messages)
        plan = planned_actions(task, self.spoiled(task.id, seed, model))
        # Which gold actions are done: walk the tool calls already in the history, in order.
        issued = _tool_calls(messages)
        search = sorted(t for t in tools if t.startswith("KB_search"))
        if search and not any(name.startswith("KB_search") for name, _ in issued):
            # banking_knowledge: look the request up once (a dense config embeds this query).
            return _call(search[0], {"query": task.opening[:200]})
        done = _replayed(issued, plan)
        # The second condition is a guard against looping if the history holds foreign calls.
        if done < len(plan) and len(issued) < len(plan) + 4:
            action = plan[done]
            return _call(action["name"], action["arguments"])
        info = ", ".join(task.communicate_info)
        note = f" For your information: {info}." if info else ""
        return {
            "content": f"I have taken care of your request.{note} "
            f"Is there anything else I can help you with? {DONE_MARKER}"
        }


def _tool_names(body: Json) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools") or [] if isinstance(t, dict) and t.get("function")}


def _tool_calls(messages: list[Json]) -> list[tuple[str, Json]]:
    """The calls the requester itself made so far (its own turns are "assistant" in its view)."""
    return [
        (tc["function"]["name"], json.loads(tc["function"].get("arguments") or "{}"))
        for m in messages
        if m.get("role") == "assistant"
        for tc in m.get("tool_calls") or []
    ]


def _replayed(issued: list[tuple[str, Json]], plan: list[Json]) -> int:
    """How many of the plan's actions the issued calls have made, in order."""
    done = 0
    for name, args in issued:
        if done < len(plan) and (name, args) == (plan[done]["name"], plan[done]["arguments"]):
            done += 1
    return done


def _call(name: str, arguments: Json) -> Json:
    return {
        "content": None,
        "tool_calls": [
            {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(arguments)}},
        ],
    }  # fmt: skip


def embedding(text: str) -> list[float]:
    """A deterministic unit-free vector for a text: its SHA-256 read as 16 signed bytes."""
    digest = hashlib.sha256(text.encode()).digest()
    return [(b - 128) / 128 for b in digest[:EMBEDDING_DIMENSIONS]]


def _embeddings(body: Json, report_cost: bool = True) -> Json:
    texts = body.get("input")
    texts = [texts] if isinstance(texts, str) else list(texts or [])
    if not texts or not all(isinstance(t, str) for t in texts):
        raise ValueError("input must be a string or a list of strings")
    as_base64 = body.get("encoding_format") == "base64"  # the openai SDK's default: float32, little-endian
    data = []
    for i, text in enumerate(texts):
        vector = embedding(text)
        value: Any = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode() if as_base64 else vector
        data.append({"object": "embedding", "index": i, "embedding": value})
    tokens = sum(_estimate_tokens(t) for t in texts)
    usage: Json = {"prompt_tokens": tokens, "total_tokens": tokens}
    if report_cost:
        usage["cost"] = tokens / 1_000_000 * 0.13  # text-embedding-3-large's list price, OpenRouter-style
    return {"object": "list", "data": data, "model": body.get("model", ""), "usage": usage}


# --- HTTP ----------------------------------------------------------------------------------------
def _completion(body: Json, message: Json, report_cost: bool = True) -> Json:
    tool_calls = message.get("tool_calls")
    out_text = (message.get("content") or "") + json.dumps(tool_calls or "")
    prompt_tokens = _estimate_tokens(json.dumps(body.get("messages"), ensure_ascii=False))
    completion_tokens = _estimate_tokens(out_text)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", ""),
        "system_fingerprint": "fp_oracle",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": message.get("content"), "tool_calls": tool_calls},
                "finish_reason": "tool_calls" if tool_calls else "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            # OpenRouter-style reported cost ($1 / $4 per million tokens), so a gateway
            # in between has a provider cost to meter.
            **({"cost": (prompt_tokens + 4 * completion_tokens) / 1_000_000} if report_cost else {}),
        },
    }


def _stream_chunks(completion: Json, include_usage: bool) -> list[Json]:
    """The same completion as SSE chunks: role, content or tool calls, finish, optional usage."""
    choice = completion["choices"][0]
    message = choice["message"]
    base = {k: completion[k] for k in ("id", "created", "model", "system_fingerprint")}
    base["object"] = "chat.completion.chunk"

    def chunk(delta: Json, finish: str | None = None) -> Json:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    if message.get("content"):
        chunks.append(chunk({"content": message["content"]}))
    for i, tc in enumerate(message.get("tool_calls") or []):
        chunks.append(chunk({"tool_calls": [{"index": i, **tc}]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        chunks.append({**base, "choices": [], "usage": completion["usage"]})
    return chunks


class _Handler(BaseHTTPRequestHandler):
    server: _OracleServer
    protocol_version = "HTTP/1.1"  # keep-alive, as LiteLLM's httpx client expects

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read .requests instead
        pass

    def _send_json(self, status: int, payload: Json) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            ids = ["oracle-agent", "oracle-user"]
            self._send_json(200, {"object": "list", "data": [{"id": i, "object": "model"} for i in ids]})
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        path = self.path.split("?")[0].rstrip("/")
        if path in ("/v1/embeddings", "/embeddings"):
            self._embed()
            return
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        except json.JSONDecodeError as exc:
            self._send_json(400, {"error": {"message": f"bad JSON: {exc}", "type": "invalid_request_error"}})
            return
        oracle = self.server.oracle
        oracle.record(body, {k.lower(): v for k, v in self.headers.items()})
        try:
            completion = _completion(body, oracle.reply(body), oracle.report_cost)
        except (ValueError, KeyError) as exc:
            # 400, not 500: a misrouted request should fail fast rather than be retried by LiteLLM.
            self._send_json(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
            return
        if not body.get("stream"):
            self._send_json(200, completion)
            return
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        payload = b"".join(
            f"data: {json.dumps(c)}\n\n".encode() for c in _stream_chunks(completion, include_usage)
        ) + b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


    def _embed(self) -> None:
        oracle = self.server.oracle
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            oracle.record(body, {k.lower(): v for k, v in self.headers.items()})
            self._send_json(200, _embeddings(body, oracle.report_cost))
        except (json.JSONDecodeError, ValueError) as exc:
            self._send_json(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})


class _OracleServer(ThreadingHTTPServer):
    daemon_threads = True
    oracle: Oracle


def start_oracle(
    port: int = 0,
    *,
    tasks_file: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
    spoil_rate: float = 0.25,
    spoil_seed: int = 0,
    host: str = "127.0.0.1",
    report_cost: bool = True,
    spoil_rates: dict[str, float] | None = None,
    domain: str = "airline",
    task_ids: Collection[str] | None = None,
) -> tuple[_OracleServer, str]:
    """Serve an Oracle in a daemon thread. Returns (server, base_url ending in /v1).

    ``server.oracle`` holds the recorded requests; stop with ``server.shutdown(); server.server_close()``.
    """
    server = _OracleServer((host, port), _Handler)
    files = [tasks_file] if isinstance(tasks_file, (str, os.PathLike)) else list(tasks_file or [find_tasks_file()])
    tasks = {k: v for f in files for k, v in load_tasks(f, task_ids).items()}  # several domains: ids differ
    server.oracle = Oracle(tasks, spoil_rate, spoil_seed, domain=domain, report_cost=report_cost,
                           spoil_rates=dict(spoil_rates or {}))
    threading.Thread(target=server.serve_forever, name="tau2-oracle", daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}/v1"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--tasks-file", help="τ² airline tasks.json (default: $TAU2_TASKS_FILE or the tau2 venv's)")
    parser.add_argument("--spoil-rate", type=float, default=0.25)
    parser.add_argument("--spoil-seed", type=int, default=0)
    args = parser.parse_args()
    server, url = start_oracle(
        args.port, tasks_file=args.tasks_file, spoil_rate=args.spoil_rate,
        spoil_seed=args.spoil_seed, host=args.host,
    )
    print(f"tau2 oracle serving {url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()


if __name__ == "__main__":
    main()
