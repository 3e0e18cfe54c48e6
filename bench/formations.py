"""Marina's own CPU per formation request, upstream time excluded, on SQLite
and on PostgreSQL, at c=1 and c=32, with the state store holding 10,000 live
conversations; against the plain passthru measured in the same run.

    .venv/bin/python bench/formations.py                      # ~2 min
    .venv/bin/python bench/formations.py --requests 300 --backends sqlite

Each backend runs in a process of its own on a fresh database (a temporary
SQLite file; a PostgreSQL database created, migrated and dropped). The store
is first filled with --conversations live conversations (their state as a
real first turn left it, under each one's derived key), then every request
is the next turn of one of them, sent to `passthru.doors.chat.chat_completions`
exactly as the ASGI edge hands it over: key check, body parsing, the
conversation key chain, the state read, the extraction and the trailing
note, the argument check's value extraction and grading, the state write,
the response and the trace (committed by the ledger writer).

Upstream time is excluded by answering every upstream call in memory, at
`passthru.upstream.post_chat` (the one doorway for upstream HTTP), with a
prepared reply: the extraction call gets one new obligation, the agent a
write tool call whose values the user stated (so no judgement follows, the
common path). What is left is Marina's work, including encoding each step's
body and parsing its reply.

Reported per cell: wall ms per request (c=1: latency; c=32: 1 / throughput)
and CPU ms per request of this process (event loop, state thread, ledger
writer; PostgreSQL's own CPU is not counted), and the ratio to the plain
passthru's CPU per request in the same cell. Then the parts, timed alone:
key chain, state read, state write, sealing (its part of the read and the
write), value extraction + grading, history reading + note building."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import per_backend  # bench/ is on sys.path when a bench runs as a script

ROOT = Path(__file__).resolve().parent.parent
KEY = "sk-marina-bench-0123456789abcdef"
AGENT = "openrouter/bench-agent"
IDS = {
    "plain (baseline)": AGENT,
    "obligations": f"marina/obligations:{AGENT}",
    "argcheck": f"marina/argcheck:{AGENT}",
    "obligations+argcheck": f"marina/obligations:marina/argcheck:{AGENT}",
}
NAMED_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_reservation_details",
            "description": "Get the details of a reservation.",
            "parameters": {"type": "object", "properties": {"reservation_id": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "cancel_reservation",
            "description": "Cancel the whole reservation.",
            "parameters": {
                "type": "object",
                "properties": {"reservation_id": {"type": "string"}, "reason": {"type": "string"}},
            },
        },
    },
]


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _reservation(conversation: int) -> str:
    return f"R{conversation:05d}X"


class Conversations:
    """τ²-sized conversations (bench/tau2_body.py's policy, history and tools,
    plus a reservation tool pair); each request takes the next turn of one."""

    def __init__(self, count: int) -> None:
        from bench.tau2_body import body

        base = body(AGENT)
        self.system = base["messages"][0]
        self.tools = base["tools"] + NAMED_TOOLS
        self.count = count
        self.turns = [1] * count
        self.cursor = 0

    def messages(self, conversation: int, turns: int) -> list[dict[str, Any]]:
        rid = _reservation(conversation)
        out: list[dict[str, Any]] = [
            self.system,
            {"role": "user", "content": f"Hi, I am user mia_li_{conversation}. Please cancel my reservation {rid}."},
        ]
        for t in range(1, turns):
            call = {"id": f"c{t}", "type": "function", "function": {"name": "get_reservation_details", "arguments": json.dumps({"reservation_id": rid})}}
            result = {"reservation_id": rid, "status": "confirmed", "flights": [{"flight_number": f"HAT{t:03d}", "date": "2024-05-01"}], "payment": "credit_card_7815826"}
            out += [
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"c{t}", "content": json.dumps(result)},
                {"role": "assistant", "content": f"Reservation {rid} is confirmed, flying HAT{t:03d}. Shall I cancel it (yes/no)?"},
                {"role": "user", "content": f"Yes, cancel {rid}, the reason is a change of plan."},
            ]
        return out

    def body(self, model: str, conversation: int, turns: int) -> dict[str, Any]:
        return {"model": model, "messages": self.messages(conversation, turns), "tools": self.tools, "temperature": 0.0}

    def next_request(self, model: str) -> tuple[dict[str, str], bytes]:
        """(headers, body) of the next turn of the next conversation in turn."""
        conversation = self.cursor % self.count
        self.cursor += 1
        self.turns[conversation] += 1
        body = self.body(model, conversation, self.turns[conversation])
        return request_headers(conversation), json.dumps(body).encode()


def request_headers(conversation: int) -> dict[str, str]:
    return {"authorization": f"Bearer {KEY}", "content-type": "application/json", "x-bench-reservation": _reservation(conversation)}


def _replies() -> dict[str, bytes]:
    from passthru.formations.argcheck import prompts as argcheck_prompts
    from passthru.formations.obligations import prompts as obligations_prompts

    def reply(message: dict[str, Any]) -> bytes:
        usage = {"prompt_tokens": 6000, "completion_tokens": 40, "total_tokens": 6040, "cost": 0.0012}
        return json.dumps({
            "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "bench-agent",
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}], "usage": usage,
        }).encode()  # fmt: skip

    return {
        obligations_prompts.EXTRACT_MARKER: reply({"content": json.dumps({"add": [{"request": 99, "what": "cancel the reservation", "target": "", "tools": ["cancel_reservation"]}], "cancel": []})}),
        obligations_prompts.JUDGE_MARKER: reply({"content": "{}"}),
        argcheck_prompts.JUDGE_MARKER: reply({"content": json.dumps({"verdict": "supported"})}),
    }


def _answer_in_memory() -> None:
    """Replace the upstream doorway with prepared replies (no network, no wait)."""
    from passthru import upstream

    by_marker = [(marker.encode(), reply) for marker, reply in _replies().items()]

    async def post_chat(provider: Any, body: bytes, incoming: Any, path: str = "") -> Any:
        head = body[:4000]  # a side call's marker opens its system prompt
        for marker, reply in by_marker:
            if marker in head:
                return upstream.Reply(200, reply, "application/json")
        # The agent cancels the reservation its user named (the bench passes it in a header Marina forwards).
        arguments = json.dumps({"reservation_id": incoming["x-bench-reservation"], "reason": "change of plan"})
        call = {"id": "w1", "type": "function", "function": {"name": "cancel_reservation", "arguments": arguments}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        payload = {"id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "bench-agent",
                   "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
                   "usage": {"prompt_tokens": 6000, "completion_tokens": 30, "total_tokens": 6030, "cost": 0.0012}}  # fmt: skip
        return upstream.Reply(200, json.dumps(payload).encode(), "application/json")

    upstream.post_chat = post_chat


async def _requests(conversations: Conversations, model: str, requests: int, concurrency: int) -> tuple[float, float, set[str]]:
    from passthru.context import Inbound
    from passthru.doors.chat import chat_completions

    queue = iter([conversations.next_request(model) for _ in range(requests)])
    labels: set[str] = set()

    async def worker() -> None:
        for headers, raw in queue:
            out = await chat_completions(Inbound("POST", "/v1/chat/completions", headers, raw, "127.0.0.1"))
            if out.status != 200:
                raise RuntimeError(f"{model}: {out.status} {out.body[:300]!r}")
            labels.add(";".join(f"{k}={v}" for k, v in sorted(out.headers.items()) if k in ("x-marina-obligations", "x-marina-argcheck")))

    cpu, wall = _cpu(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return (time.perf_counter() - wall) / requests * 1e3, (_cpu() - cpu) / requests * 1e3, labels


def _fill(conversations: Conversations) -> int:
    """Store `count` live conversations per formation id (the model id is part of a conversation's
    key), each with the state a real first turn left."""
    from datetime import UTC, datetime, timedelta

    from django.conf import settings

    from passthru.formations import state
    from passthru.models import ConversationState

    first = conversations.body(IDS["obligations+argcheck"], 0, 1)
    # the checkpoint the turn asyncio.run made in child() left
    template = state.checkpoint_sync(state.conversation("bench", "", first["messages"], first["tools"], model=first["model"]))
    plain = json.dumps(template).encode()
    now = datetime.now(UTC)
    expires = now + timedelta(seconds=settings.MARINA_STATE_TTL)
    rows = []
    for model in [m for m in IDS.values() if m.startswith("marina/")]:
        for i in range(1 if model == first["model"] else 0, conversations.count):
            body = conversations.body(model, i, 1)
            conv = state.conversation("bench", "", body["messages"], body["tools"], model=model)
            sealed = json.loads(conv.sealer.seal(plain))  # each sealed under its own conversation, as a real turn does
            rows.append(ConversationState(key=conv.key, state=sealed, version=1, updated_at=now, expires_at=expires))
    ConversationState.objects.bulk_create(rows, batch_size=1000)
    return ConversationState.objects.count()


def _parts(conversations: Conversations, rounds: int) -> dict[str, dict[str, float]]:
    """Microseconds per call of the formation's own pieces, each timed alone."""
    from kernel.dbthread import relax_commit
    from passthru.formations import state
    from passthru.formations.argcheck.values import channels_of, extract_values, grade
    from passthru.formations.conversation import read_history, with_trailing_note
    from passthru.formations.obligations.ledger import Ledger
    from passthru.formations.obligations.prompts import reminder_note

    relax_commit()  # as the state thread's connection is
    model = IDS["obligations+argcheck"]
    body = conversations.body(model, 7, conversations.turns[7] + 1)
    messages, tools = body["messages"], body["tools"]
    conv = state.conversation("bench", "", messages, tools, model=model)
    loaded = state.load_sync(conv)
    # A write stores a new checkpoint (a key already written is kept): a fresh turn of another
    # conversation each time, its key chain made before the clock starts.
    fresh = iter([
        state.conversation("bench", "", conversations.body(model, i, conversations.turns[i] + 1)["messages"], tools, model=model)
        for i in (n % conversations.count for n in range(8, 8 + rounds))
    ])  # fmt: skip
    ledger = Ledger.of(loaded.state.get("obligations"))
    arguments = {"reservation_id": _reservation(7), "reason": "change of plan"}

    def timed(fn: Any) -> dict[str, float]:
        cpu, started = _cpu(), time.perf_counter()
        for _ in range(rounds):
            fn()
        return {"wall": round((time.perf_counter() - started) / rounds * 1e6, 1), "cpu": round((_cpu() - cpu) / rounds * 1e6, 1)}

    return {
        "key chain": timed(lambda: state.conversation("bench", "", messages, tools, model=model)),
        "state read": timed(lambda: state.load_sync(conv)),
        "state write": timed(lambda: state.commit_sync(next(fresh), lambda s: dict(s))),
        "seal + open (in read and write)": timed(lambda: _seal_open(conv, loaded.state)),
        "values: extract + grade": timed(lambda: _grade_all(arguments, channels_of(messages), extract_values, grade)),
        "history + note": timed(lambda: with_trailing_note(messages, reminder_note(ledger.open_items()) + str(read_history(messages).requests[-1:]))),
    }


def _seal_open(conv: Any, stored: dict[str, Any]) -> Any:
    """What sealing adds to a turn: the key derived (a fresh sealer, as each
    request makes), the state sealed for the write and opened at the read."""
    from passthru.formations.seal import Sealer

    sealer = Sealer(b"h\0" + bytes(32))
    return sealer.open(json.loads(sealer.seal(json.dumps(stored).encode())))


def _grade_all(arguments: Any, channels: Any, extract: Any, grade: Any) -> list[str]:
    return [grade(v, channels) for v in extract(arguments)]


def child(requests: int, count: int) -> dict[str, Any]:
    """In a process of its own (DATABASE_URL set): migrate, fill, measure."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marina.settings")
    os.environ["MODEL_API_KEYS"] = f"{KEY}:bench"
    os.environ["OPENROUTER_API_KEY"] = "sk-or-bench"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", "--no-input", verbosity=0)
    _answer_in_memory()
    conversations = Conversations(count)
    # Conversation 0's first turn, for real: its stored state is every other conversation's template.
    first = json.dumps(conversations.body(IDS["obligations+argcheck"], 0, 1)).encode()

    async def first_turn() -> None:
        from passthru.context import Inbound
        from passthru.doors.chat import chat_completions

        out = await chat_completions(Inbound("POST", "/v1/chat/completions", request_headers(0), first, "127.0.0.1"))
        assert out.status == 200, out.body

    asyncio.run(first_turn())
    results: dict[str, Any] = {"live_conversations": _fill(conversations), "cells": {}}
    for model in IDS.values():
        asyncio.run(_requests(conversations, model, 50, 4))  # warm-up: connections, caches, imports
    for concurrency in (1, 32):
        for label, model in IDS.items():
            wall, cpu, seen = asyncio.run(_requests(conversations, model, requests, concurrency))
            results["cells"][f"{label} c={concurrency}"] = {"wall_ms": round(wall, 3), "cpu_ms": round(cpu, 3), "headers": sorted(seen)[:2]}
    results["live_conversations_after"] = _live()
    results["parts_us"] = _parts(conversations, 300)
    from ledger.spend.services import close_writer_connection
    from passthru.formations import state

    state.close_connection()
    close_writer_connection()
    return results


def _live() -> int:
    from datetime import UTC, datetime

    from passthru.models import ConversationState

    return ConversationState.objects.filter(expires_at__gt=datetime.now(UTC)).count()


def measure(database_url: str, requests: int, count: int) -> dict[str, Any]:
    env = {**os.environ, "DATABASE_URL": database_url, "MARINA_ENV_FILE": os.devnull}
    for name in [k for k in env if k.startswith("MARINA_") and k != "MARINA_ENV_FILE"]:
        del env[name]  # the defaults, whatever the caller's shell holds
    out = subprocess.run(
        [sys.executable, __file__, "--child", "--requests", str(requests), "--conversations", str(count)],
        env=env, cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"bench/formations.py: the {database_url.split(':')[0]} run failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=600, help="requests per cell (default 600)")
    parser.add_argument("--conversations", type=int, default=10_000, help="live conversations in the store (default 10000)")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--pg-admin-url", default=os.environ.get("MARINA_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.requests, args.conversations)))
        return
    report = per_backend(
        args.backends, args.pg_admin_url, "marina_formations_bench",
        lambda url: measure(url, args.requests, args.conversations),
    )  # fmt: skip
    for backend, result in report.items():
        print(f"{backend}: {result['live_conversations']} live conversations before, {result['live_conversations_after']} after")
        cells = result["cells"]
        for label, row in cells.items():
            base = cells[f"plain (baseline) c={label.rsplit('c=', 1)[1]}"]["cpu_ms"]
            print(f"  {label:28} {row['wall_ms']:7.3f} ms wall/req  {row['cpu_ms']:7.3f} ms CPU/req  x{row['cpu_ms'] / base:4.2f} of plain")
        print("  parts (µs wall / CPU each): " + ", ".join(f"{k} {v['wall']} / {v['cpu']}" for k, v in result["parts_us"].items()))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
