"""Reading a chat request's history for the obligations ledger and the
argument check, and placing their trailing note. Pure functions.

The trailing note rides *after* the cacheable prefix: appended to the last
user message when the history ends with one, else as a new user message after
the last message (a trailing tool result). System text, tools and every
earlier message stay byte-identical, so a provider's prompt cache still hits."""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SYSTEM_ROLES = frozenset({"system", "developer"})


def text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of a content array."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return ""


def first_message(payload: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The message of a chat completion's first choice, or None when it has none."""
    choices = (payload or {}).get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        message = choices[0].get("message")
        if isinstance(message, dict):
            return message
    return None


def parse_arguments(raw: Any) -> Any:
    """A tool call's arguments as JSON when they parse, else the raw value."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def calls_of(message: Mapping[str, Any]) -> list[tuple[str, str, Any]]:
    """(id, name, parsed arguments) of each well-formed tool call of a message."""
    found = []
    for call in message.get("tool_calls") or ():
        if not isinstance(call, Mapping):
            continue
        fn = call.get("function")
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            continue
        call_id = call.get("id")
        found.append((call_id if isinstance(call_id, str) else "", str(fn["name"]), parse_arguments(fn.get("arguments"))))
    return found


@dataclass
class Request:
    """A user turn: its 1-based number, its text and the assistant text just before it."""

    turn: int
    text: str
    before: str


@dataclass
class Call:
    """An answered tool call: name, arguments, the user turn it followed, and
    whether its result looks like a success."""

    call_id: str
    name: str
    arguments: Any
    turn: int
    ok: bool


@dataclass
class History:
    requests: list[Request] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)  # answered calls, in order


_ERROR_TEXT = re.compile(r"^\s*(error|exception|failed|failure|traceback)\b", re.IGNORECASE)
_ERROR_STATUS = frozenset({"error", "failed", "failure"})


def result_ok(text: str) -> bool:
    """A tool result that does not look like an error."""
    if _ERROR_TEXT.match(text):
        return False
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            value = json.loads(stripped)
        except ValueError:
            return True
        if isinstance(value, Mapping):
            first = next(iter(value), None)
            if first in ("error", "errors"):
                return False
            status = value.get("status")
            if isinstance(status, str) and status.lower() in _ERROR_STATUS and all(
                not isinstance(v, (Mapping, list)) for v in value.values()
            ):
                return False
    return True


def read_history(messages: Sequence[Any]) -> History:
    history = History()
    pending: dict[str, tuple[str, Any, int]] = {}
    last_assistant_text: str = ""
    turn = 0
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        role = message.get("role")
        if role == "user":
            turn += 1
            history.requests.append(Request(turn, text_of(message.get("content")), last_assistant_text))
        elif role == "assistant":
            said: str = text_of(message.get("content")).strip()
            if said:
                last_assistant_text = said
            for call_id, name, arguments in calls_of(message):
                if call_id:
                    pending[call_id] = (name, arguments, turn)
        elif role == "tool":
            answered = message.get("tool_call_id")
            if isinstance(answered, str) and answered in pending:
                name, arguments, at = pending.pop(answered)
                ok = result_ok(text_of(message.get("content")))
                history.calls.append(Call(answered, name, arguments, at, ok))
    return history


def with_trailing_note(messages: Sequence[Any], note: str) -> list[Any]:
    """The messages with `note` after the cacheable prefix (see the module doc)."""
    out = list(messages)
    if not note:
        return out
    last = out[-1] if out else None
    if isinstance(last, Mapping) and last.get("role") == "user":
        content = last.get("content")
        if isinstance(content, list):
            new_content: Any = [*content, {"type": "text", "text": note}]
        else:
            text = content if isinstance(content, str) else ""
            new_content = f"{text}\n\n{note}" if text else note
        out[-1] = {**last, "content": new_content}
    else:
        out.append({"role": "user", "content": note})
    return out


def join_notes(notes: Iterable[str]) -> str:
    return "\n\n".join(n for n in notes if n)


def clamp(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "[…]"


def system_texts(messages: Sequence[Any]) -> list[str]:
    return [
        text_of(m.get("content"))
        for m in messages
        if isinstance(m, Mapping) and m.get("role") in SYSTEM_ROLES
    ]
