"""Per-conversation state of the obligations ledger and the argument check,
kept in the database so that every worker and host sees the same ledger.

**A function of the conversation in hand.** What a request sees is the state
its own history led to, never another conversation's, nor a later state of
its own: the same conversation sent twice is read, judged and nudged the same
way twice, and two runs (or two arms of one replicate) that send the same
opening never see each other's later decisions.

**The key.** A chain of keys is derived from the request: `<who>|h:<hash>`
over the body's `seed`, the requested model id, the `x-marina-session` header
(when sent), the system text, the tool schemas and the first user message,
then `<who>|h:<hash>@<n>` for every n = 1 … the number of non-system messages
(a running hash of each message's role, text, tool calls, tool_call_id and
name: a chain of prefix hashes). `<who>` is the caller's key name. τ² sends
each trial's seed in every request, so two trials of one task never share a
key; the kit sends a per-run session (and each arm asks for its own model id),
so two runs or two arms never do either.

**Immutable checkpoints.** A request reads the state stored under the deepest
*strict* ancestor of its history (keys[:-1]: the checkpoint an earlier turn
of this conversation left) and writes the state after its turn under its own
key, once. A key already written is never overwritten: a replay of that history
(a retry, a rerun with the same seed) reads the same ancestor, makes the same
calls, and its result leaves the stored checkpoint as it was. A turn that
ends in an error writes nothing (the client got no answer to build on).
Concurrent requests of one history race only for the insert; the loser keeps
the winner's row. No lock is held while a provider answers.

**Sealed.** A row's state is stored sealed (passthru/formations/seal.py):
AES-256-GCM under a key derived from the server secret and the
conversation's base digest (the row key shows only 96 bits of it), so the
words of the obligations ledger and argcheck's signatures are not readable in
the database. A plain row (written before sealing) is read as it is; a row
no secret opens is no state.

**Bounds.** Each state is bounded by its owners (≤ 24 obligations, ≤ 64
signatures); rows idle for MARINA_STATE_TTL seconds are ignored and deleted
(each process sweeps at most once a minute).

All database work runs on one thread per process with one persistent
connection (the ledger writer's reasoning: a thread and a connection per
call cost more than the query)."""
from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from django.conf import settings
from django.db import IntegrityError, connection, transaction

from kernel.dbthread import DbThread, relax_commit
from kernel.dbwriter import write_turn as sqlite_write_turn
from passthru.formations.conversation import SYSTEM_ROLES, text_of
from passthru.formations.seal import Sealer, Unreadable

log = logging.getLogger(__name__)

CHUNK = 200  # keys per lookup statement (well under SQLite's 999 parameters), deepest first
SESSION_CHARS = 128
HASH_CHARS = 24
SWEEP_SECONDS = 60.0

State = dict[str, Any]


# --- The key ------------------------------------------------------------------
def _digest(*parts: bytes) -> bytes:
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
        h.update(b"\0")
    return h.digest()


def _json(value: Any) -> bytes:
    if value is None:
        return b""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return repr(value).encode("utf-8", "replace")


def _text(content: Any) -> bytes:
    return text_of(content).encode("utf-8", "surrogatepass")


def _seed(value: Any) -> bytes:
    """The body's `seed` (τ²'s trial seed) as key material; b"" when absent or not an integer."""
    if isinstance(value, bool) or not isinstance(value, int):
        return b""
    return str(value).encode()


@dataclass(frozen=True)
class Conversation:
    """A conversation as the store knows it: its key chain (shallowest first)
    and the sealer of its state (whose material is never stored)."""

    keys: list[str]
    sealer: Sealer = field(repr=False)

    @property
    def key(self) -> str:
        return self.keys[-1]


def conversation(
    who: str, session: str, messages: Sequence[Any], tools: Any, seed: Any = None, model: str = ""
) -> Conversation:
    """The key chain (the base, then one key per non-system message; the last
    is the conversation's current key) and the sealer of its state. The
    session and the model id only set the chain apart: a conversation is
    still told by its history."""
    session = session.strip()[:SESSION_CHARS]
    dicts = [m for m in messages if isinstance(m, Mapping)]
    system = "\x01".join(text_of(m.get("content")) for m in dicts if m.get("role") in SYSTEM_ROLES)
    turns = [m for m in dicts if m.get("role") not in SYSTEM_ROLES]
    first_user = next((m for m in turns if m.get("role") == "user"), None)
    base = _digest(
        who.encode(),
        _seed(seed),
        model.encode("utf-8", "surrogatepass"),
        session.encode("utf-8", "surrogatepass"),
        system.encode("utf-8", "surrogatepass"),
        _json(tools),
        _text(first_user.get("content")) if first_user else b"",
    )
    keys = [f"{who}|h:{base.hex()[:HASH_CHARS]}"]
    running = base
    for n, message in enumerate(turns, start=1):
        name = message.get("name")
        call_id = message.get("tool_call_id")
        running = _digest(
            running,
            str(message.get("role")).encode(),
            _text(message.get("content")),
            _json(message.get("tool_calls")),
            call_id.encode("utf-8", "replace") if isinstance(call_id, str) else b"",
            name.encode("utf-8", "replace") if isinstance(name, str) else b"",
        )
        keys.append(f"{who}|h:{running.hex()[:HASH_CHARS]}@{n}")
    # The whole base digest seals the state: the keys show its first 96 bits, never the rest.
    return Conversation(keys, Sealer(b"h\0" + base))


def conversation_keys(
    who: str, session: str, messages: Sequence[Any], tools: Any, seed: Any = None, model: str = ""
) -> list[str]:
    """The key chain alone (see conversation)."""
    return conversation(who, session, messages, tools, seed, model).keys


def _chunks(keys: Sequence[str]) -> list[list[str]]:
    """The chain in lookup statements of at most CHUNK keys, deepest first: a
    turn usually finds its row in the first (its previous turn is a message or
    two back), and a chain of any length costs no more parameters than that."""
    deepest_first = list(reversed(keys))
    return [deepest_first[i : i + CHUNK] for i in range(0, len(deepest_first), CHUNK)]


# --- The store ----------------------------------------------------------------
@dataclass
class Loaded:
    """A conversation's state as read at the start of a turn."""

    keys: list[str]
    state: State = field(default_factory=dict)
    found_key: str | None = None  # the key it was read under (None: new conversation)
    version: int = 0
    error: str = ""  # the store failed; the turn runs on an empty state
    unreadable: bool = False  # a row was found that no secret opens; the turn runs on an empty state

    @property
    def key(self) -> str:
        return self.keys[-1]


_executor = DbThread("formation-state")  # kernel/dbthread.py
_swept_at = 0.0


def _on_thread(fn: Callable[..., Any], *args: Any) -> Any:
    # On PostgreSQL this thread's connection commits without waiting for the
    # WAL flush (as the rate limiter's): a turn's state lost in a database
    # crash is a ledger that forgets its last turn, which the formations
    # survive (they fail open), while waiting for the flush held every turn ~5-8 ms.
    relax_commit()  # kernel/dbthread.py
    return fn(*args)


async def _run(fn: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.wrap_future(_executor.submit(_on_thread, fn, *args))


def _ttl() -> timedelta:
    return timedelta(seconds=settings.MARINA_STATE_TTL)


# The store's statements are written out rather than built by the ORM: building
# a query cost ~0.2 ms of CPU, more than running it (bench/formations.py).
TABLE = "formation_state"


def _cursor() -> Any:
    """A DB-API cursor on this thread's connection (inside transaction.atomic, in its transaction)."""
    connection.ensure_connection()
    return connection.connection.cursor()


def _sql(sql: str) -> str:
    return sql.replace("%s", "?") if connection.vendor == "sqlite" else sql


def _when(moment: datetime) -> Any:
    return connection.ops.adapt_datetimefield_value(moment)


def _loads(value: Any) -> State:
    if isinstance(value, (str, bytes, bytearray)):
        value = orjson.loads(value)
    return value if isinstance(value, dict) else {}


def _open(value: Any, sealer: Sealer) -> tuple[State, bool]:
    """A row's state, opened: (state, unreadable). A plain row (written before
    sealing) reads as it is; a sealed one no secret opens is no state."""
    stored = _loads(value)
    try:
        plain = sealer.open(stored)
    except Unreadable as exc:
        log.warning("formation state unreadable (%s): the conversation starts afresh", exc)
        return {}, True
    return (stored, False) if plain is None else (_loads(plain), False)


def _dumps(state: State) -> str:
    try:
        return orjson.dumps(state).decode()
    except TypeError:  # what orjson refuses (an integer beyond 64 bits) json writes
        import json

        return json.dumps(state)


def _rows(keys: Sequence[str], now: datetime) -> dict[str, tuple[int, Any, int, bool]]:
    """The rows under `keys` (at most CHUNK), live or not: key -> (id, stored state, version, live)."""
    cursor = _cursor()
    marks = ", ".join(["%s"] * len(keys))
    cursor.execute(
        _sql(f'SELECT "key", id, state, version, expires_at > %s FROM {TABLE} WHERE "key" IN ({marks})'), [_when(now), *keys]
    )
    return {key: (row_id, state, version, bool(live)) for key, row_id, state, version, live in cursor.fetchall()}


def _deepest_live(chunk: Sequence[str], rows: Mapping[str, tuple[int, Any, int, bool]]) -> tuple[str, Any, int] | None:
    """The first key of `chunk` (deepest first) with a live row among `rows`: (key, stored state, version)."""
    return next(((key, rows[key][1], rows[key][2]) for key in chunk if key in rows and rows[key][3]), None)


def _deepest(keys: Sequence[str]) -> tuple[str, Any, int] | None:
    """The deepest live row among `keys`: (key, stored state, version)."""
    now = datetime.now(UTC)
    for chunk in _chunks(keys):
        found = _deepest_live(chunk, _rows(chunk, now))
        if found is not None:
            return found
    return None


def load_sync(conv: Conversation) -> Loaded:
    """The state this request's history led to: the deepest live checkpoint
    strictly before its own key (its own key holds the state *after* this
    turn, left by an earlier sending of the same history)."""
    keys = conv.keys
    found = _deepest(keys[:-1])
    if found is None:
        return Loaded(keys)
    key, stored, version = found
    state, unreadable = _open(stored, conv.sealer)
    return Loaded(keys, state, key, version, unreadable=unreadable)


def checkpoint_sync(conv: Conversation) -> State | None:
    """The state stored after a turn with exactly this history (None: no such turn)."""
    found = _deepest(conv.keys[-1:])
    return None if found is None else _open(found[1], conv.sealer)[0]


def commit_sync(conv: Conversation, change: Callable[[State], State]) -> State:
    """Store the state after this turn, sealed, under the conversation's own
    key: `change` applied to the checkpoint the turn read. A key already
    written keeps its state (immutable checkpoints, see the module doc); the
    state stored is returned."""
    keys, current = conv.keys, conv.key
    for attempt in range(3):
        try:
            with sqlite_write_turn(), transaction.atomic():
                postgres = connection.vendor == "postgresql"
                now = datetime.now(UTC)
                # This turn's own row and its deepest ancestors in one statement (one round
                # trip fewer on PostgreSQL); an ancestor further back, if none of those, after.
                first = _chunks(keys)[0]
                rows = _rows(first, now)
                mine = rows.get(current)
                if mine is not None and mine[3]:
                    return _open(mine[1], conv.sealer)[0]  # written by an earlier sending of this history
                found = _deepest_live(first[1:], rows)
                if found is None and len(keys) > len(first):
                    found = _deepest(keys[: len(keys) - len(first)])
                state = _open(found[1], conv.sealer)[0] if found else {}
                new_state = change(state)
                sealed = conv.sealer.seal(_dumps(new_state).encode())
                as_json = "CAST(%s AS jsonb)" if postgres else "%s"
                stamps = [len(keys) - 1, _when(now), _when(now + _ttl())]  # version: the checkpoint's depth
                cursor = _cursor()
                if mine is None:
                    cursor.execute(
                        _sql(f'INSERT INTO {TABLE} ("key", state, version, updated_at, expires_at) VALUES (%s, {as_json}, %s, %s, %s)'),
                        [current, sealed, *stamps],
                    )
                else:  # an expired row under this key: the conversation starts afresh here
                    cursor.execute(
                        _sql(f"UPDATE {TABLE} SET state = {as_json}, version = %s, updated_at = %s, expires_at = %s WHERE id = %s"),
                        [sealed, *stamps, mine[0]],
                    )
            _maybe_sweep()
            return new_state
        except (IntegrityError, connection.Database.IntegrityError):  # type: ignore[attr-defined]  # Django's, and the raw driver's
            # Another request with this history inserted first: the next attempt reads its row.
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _maybe_sweep() -> None:
    global _swept_at
    now = time.monotonic()
    if now - _swept_at < SWEEP_SECONDS:
        return
    _swept_at = now
    from passthru.models import ConversationState

    try:
        with sqlite_write_turn():
            ConversationState.objects.filter(expires_at__lte=datetime.now(UTC)).delete()
    except Exception:
        log.exception("could not sweep expired conversation state")


async def load(conv: Conversation) -> Loaded:
    """The state under the deepest known key; an empty state if the store fails (fail open)."""
    try:
        loaded: Loaded = await _run(load_sync, conv)
        return loaded
    except Exception as exc:
        log.exception("could not read conversation state")
        return Loaded(conv.keys, error=type(exc).__name__)


async def commit(conv: Conversation, change: Callable[[State], State]) -> str:
    """Store the turn's changes; '' on success, else the error's name (logged, fail open)."""
    try:
        await _run(commit_sync, conv, change)
        return ""
    except Exception as exc:
        log.exception("could not write conversation state")
        return type(exc).__name__


def close_connection() -> None:
    """Close the state thread's connection (tests do, before dropping a database)."""
    _executor.close_connection()


async def run_on_state_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a small read (crews, /v1/models) on the state thread and its connection."""
    return await _run(fn, *args)
