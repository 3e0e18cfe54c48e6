"""The held-write guard: may a revision change the draft's state-changing calls?

A revision may rewrite text and read-only lookups freely. A write call (an
order edit, a payment, a cancellation) stays exactly as drafted unless the
checker cited a concrete conflict that justifies the change:

* the conflict's quote, normalised, is at least 12 characters long and is
  found in the conversation before the draft (rules, user turns, tool calls
  and tool results);
* a modified call is the call the conflict names, and only the cited
  argument changed;
* a dropped or an added call is the call the conflict names;
* no new value introduces an id-like token found nowhere in the conversation.

Plain functions over OpenAI-shaped messages: no HTTP, no Django."""
from __future__ import annotations

import copy
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from passthru.formations.conversation import text_of
from passthru.formations.tooleffect import WRITE, Effect, call_effect

MIN_QUOTE_CHARS = 12

_QUOTES = re.compile("[\"'`\u2018\u2019\u201a\u201b\u201c\u201d\u201e\u201f\u00ab\u00bb]")
_SPACE = re.compile(r"\s+")
_ELLIPSIS = re.compile(r"^(?:\.\.\.|\u2026)+|(?:\.\.\.|\u2026)+$")
_PATH_PART = re.compile(r"\.?([A-Za-z_][\w\-]*)|\[(\d+)\]|\[[\"']([^\"']+)[\"']\]")
_ID_CHARS = re.compile(r"^[#\w.:@/\-]+$")
_SHORT_NUMBER = re.compile(r"^-?\d{1,3}(?:\.\d+)?$")
_TOKEN_SPLIT = re.compile(r"[\s,;]+")


@dataclass(frozen=True)
class Conflict:
    """What the checker cites to justify changing a write call."""

    quote: str
    call: str | None = None  # tool name
    argument: str | None = None  # argument path, e.g. new_item_ids[0] or payment.payment_id


@dataclass(frozen=True)
class GuardDecision:
    accepted: bool
    reason: str  # never a value of the conversation's (traced with bodies off too)
    writes_changed: bool = False
    invented: tuple[str, ...] = ()  # the ids a held revision made up (traced only with bodies on)

    @property
    def label(self) -> str:
        return "accepted" if self.accepted else "held"


@dataclass(frozen=True)
class WriteCall:
    name: str
    args: Any  # parsed JSON, or the raw string when it is not JSON
    parsed: bool

    @property
    def canonical(self) -> str:
        return json.dumps(self.args, sort_keys=True, ensure_ascii=False) if self.parsed else str(self.args)


# --- Text --------------------------------------------------------------------
def normalise(text: str) -> str:
    """Lower-case, quote characters removed, whitespace collapsed: a quote the
    checker copied from a JSON tool result still matches its source."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = _QUOTES.sub("", text)
    return _SPACE.sub(" ", text).strip()


def tool_calls(message: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """(name, raw arguments) of a message's function calls, in order."""
    found: list[tuple[str, str]] = []
    for call in (message or {}).get("tool_calls") or ():
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            continue
        args = fn.get("arguments")
        found.append((fn["name"], args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)))
    return found


def message_text(message: Mapping[str, Any]) -> str:
    """A message's text plus its tool calls rendered as `name(arguments)`."""
    lines = [text_of(message.get("content"))]
    lines += [f"{name}({args})" for name, args in tool_calls(message)]
    return "\n".join(line for line in lines if line)


def conversation_text(messages: Iterable[Mapping[str, Any]]) -> str:
    """Normalised text of every message (system rules, turns, calls, tool results)."""
    return normalise("\n".join(message_text(m) for m in messages if isinstance(m, Mapping)))


def quote_found(quote: str, context: str) -> bool:
    """`context` is already normalised (conversation_text)."""
    needle = _ELLIPSIS.sub("", normalise(quote)).strip()
    return len(needle) >= MIN_QUOTE_CHARS and needle in context


# --- Ids ----------------------------------------------------------------------
def _leaves(value: Any) -> Iterable[Any]:
    if isinstance(value, Mapping):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def id_tokens(value: Any) -> set[str]:
    """Id-like tokens in a value's leaves: order and user ids, dates, card
    fragments, big numbers. Small numbers (quantities, counts) are not ids."""
    tokens: set[str] = set()
    for leaf in _leaves(value):
        if isinstance(leaf, bool) or leaf is None:
            continue
        if isinstance(leaf, (int, float)):
            if abs(leaf) >= 1000:
                tokens.add(str(int(leaf)) if float(leaf).is_integer() else str(leaf))
            continue
        for raw in _TOKEN_SPLIT.split(str(leaf)):
            token = raw.lstrip("#\"'([{").rstrip("\"'),.]};:")
            if len(token) >= 3 and any(c.isdigit() for c in token) and _ID_CHARS.match(token):
                if not _SHORT_NUMBER.match(token):
                    tokens.add(token)
    return tokens


def invented_ids(value: Any, context: str) -> list[str]:
    """Id-like tokens of `value` found nowhere in the (normalised) conversation."""
    return sorted(t for t in id_tokens(value) if normalise(t) not in context)


# --- Argument paths -----------------------------------------------------------
_MISSING = object()


def parse_path(path: str) -> list[str | int] | None:
    """`passengers[1].dob` -> ['passengers', 1, 'dob']; None if malformed."""
    path = path.strip()
    for prefix in ("$.", "arguments.", "args."):
        if path.startswith(prefix):
            path = path[len(prefix) :]
    parts: list[str | int] = []
    pos = 0
    while pos < len(path):
        match = _PATH_PART.match(path, pos)
        if match is None or match.end() == pos:
            return None
        name, index, quoted = match.groups()
        parts.append(int(index) if index is not None else (name or quoted))
        pos = match.end()
    return parts or None


def value_at(value: Any, path: list[str | int]) -> Any:
    for part in path:
        if isinstance(part, int) and isinstance(value, list) and part < len(value):
            value = value[part]
        elif isinstance(part, str) and isinstance(value, Mapping) and part in value:
            value = value[part]
        else:
            return _MISSING
    return value


def masked(value: Any, path: list[str | int]) -> Any:
    """A copy of `value` with whatever sits at `path` replaced by a marker."""
    out = copy.deepcopy(value)
    holder = value_at(out, path[:-1])
    last = path[-1]
    if isinstance(last, int) and isinstance(holder, list) and last < len(holder):
        holder[last] = "\u0000masked"
    elif isinstance(last, str) and isinstance(holder, dict):
        holder[last] = "\u0000masked"  # also when absent: an added key counts as the cited change
    return out


# --- The guard ----------------------------------------------------------------
def write_calls(message: Mapping[str, Any] | None, effects: Mapping[str, Effect]) -> list[WriteCall]:
    calls = []
    for name, raw in tool_calls(message):
        if call_effect(name, effects) != WRITE:
            continue
        try:
            calls.append(WriteCall(name, json.loads(raw), True))
        except ValueError:
            calls.append(WriteCall(name, raw, False))
    return calls


def _by_name(calls: list[WriteCall]) -> dict[str, list[WriteCall]]:
    grouped: dict[str, list[WriteCall]] = {}
    for call in calls:
        grouped.setdefault(call.name, []).append(call)
    return grouped


def guard_revision(
    *,
    draft: Mapping[str, Any],
    revision: Mapping[str, Any],
    conflict: Conflict | None,
    conversation: list[Mapping[str, Any]],
    effects: Mapping[str, Effect],
) -> GuardDecision:
    """Accept or hold a revision. `conversation` is every message before the
    draft; `effects` maps declared tool names to read_only/write."""
    before, after = write_calls(draft, effects), write_calls(revision, effects)
    if [(c.name, c.canonical) for c in before] == [(c.name, c.canonical) for c in after]:
        return GuardDecision(True, "write calls unchanged")
    if conflict is None:
        return GuardDecision(False, "write calls changed without a cited conflict", True)
    context = conversation_text(conversation)
    if not quote_found(conflict.quote, context):
        return GuardDecision(False, "the cited quote is not found in the conversation (or is under 12 characters)", True)

    drafted, revised = _by_name(before), _by_name(after)
    changed: list[str] = []
    for name in sorted(set(drafted) | set(revised), key=lambda n: (n not in drafted, n)):
        old, new = drafted.get(name, []), revised.get(name, [])
        for a, b in zip(old, new):
            if a.canonical == b.canonical:
                continue
            problem, made_up = _check_modified(a, b, conflict, context)
            if problem:
                return GuardDecision(False, problem, True, made_up)
            changed.append(f"modified {name}")
        for _ in old[len(new) :]:
            if conflict.call != name:
                return GuardDecision(False, f"drops {name} but the conflict does not name it", True)
            changed.append(f"dropped {name}")
        for b in new[len(old) :]:
            if conflict.call != name:
                return GuardDecision(False, f"adds {name} but the conflict does not name it", True)
            invented = invented_ids(b.args, context)
            if invented:
                return GuardDecision(
                    False, f"added {name} introduces {len(invented)} id(s) found nowhere in the conversation", True, tuple(invented)
                )
            changed.append(f"added {name}")
    if not changed:
        # Same calls, same arguments, another order: no single citation justifies that.
        return GuardDecision(False, "reorders the write calls", True)
    return GuardDecision(True, "; ".join(changed) + " as the cited conflict allows", True)


def _check_modified(a: WriteCall, b: WriteCall, conflict: Conflict, context: str) -> tuple[str, tuple[str, ...]]:
    """Why a changed call is not allowed ('' when it is), and the ids it made up."""
    if conflict.call != a.name:
        return f"modifies {a.name} but the conflict does not name it", ()
    if not conflict.argument:
        return f"modifies {a.name} but the conflict cites no argument", ()
    path = parse_path(conflict.argument)
    if path is None:
        return "the cited argument is not an argument path", ()
    if not (a.parsed and b.parsed):
        return f"the arguments of {a.name} are not JSON, so no single argument can be told apart", ()
    if value_at(a.args, path) is _MISSING and value_at(b.args, path) is _MISSING:
        return f"{a.name} has no argument {conflict.argument}", ()
    if json.dumps(masked(a.args, path), sort_keys=True) != json.dumps(masked(b.args, path), sort_keys=True):
        return f"modifies {a.name} beyond the cited argument {conflict.argument}", ()
    new_value = value_at(b.args, path)
    if new_value is not _MISSING:
        invented = invented_ids(new_value, context)
        if invented:
            problem = f"the new {conflict.argument} introduces {len(invented)} id(s) found nowhere in the conversation"
            return problem, tuple(invented)
    return "", ()
