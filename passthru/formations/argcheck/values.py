"""The argument check's mechanics: the values a tool call carries (ids,
amounts, dates, options) and where in the conversation each was stated.
Pure functions.

Evidence comes in channels: the user's messages and tool results count
(`strong`); the assistant's own text and the system text do not (`weak`: the
model may have invented a value and then repeated it); the assistant's own
tool-call arguments are never evidence."""
from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import orjson

from passthru.formations.conversation import SYSTEM_ROLES, parse_arguments, text_of

MAX_VALUES = 24

FREE_TEXT_KEYS = frozenset({
    "reason", "reasons", "summary", "note", "notes", "message", "comment", "comments", "description",
    "content", "text", "body", "explanation", "details", "query", "title",
})  # fmt: skip

_MONTHS = {
    name: i
    for i, names in enumerate(
        [("jan", "january"), ("feb", "february"), ("mar", "march"), ("apr", "april"), ("may",), ("jun", "june"),
         ("jul", "july"), ("aug", "august"), ("sep", "sept", "september"), ("oct", "october"), ("nov", "november"),
         ("dec", "december")],
        start=1,
    )
    for name in names
}  # fmt: skip
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})(?:[T ][\d:.]+Z?)?\b")
_US = re.compile(r"\b(\d{1,2})/(\d{1,2})/(\d{4})\b")
_MDY = re.compile(rf"\b({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.IGNORECASE)
_DMY = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({_MONTH})\.?,?\s+(\d{{4}})\b", re.IGNORECASE)
_AMOUNT = re.compile(r"^[-+]?\$?\d{1,3}(?:,\d{3})+(?:\.\d+)?$|^[-+]?\$?\d+(?:\.\d+)?$")
_NUMBER_IN_TEXT = re.compile(r"(?<![\w.])[-+]?\$?\d[\d,]*(?:\.\d+)?")
_ID_IN_PHRASE = re.compile(r"[#\w.:@/-]*\d[#\w.:@/-]*")


@dataclass(frozen=True)
class Value:
    path: str  # the argument path: order_id, items[0].price
    kind: str  # id, number, date, option
    text: str  # canonical: lower-cased id/option, 1250.5, 2026-05-03
    part: bool = False  # an id found inside a short phrase ("card ending 4821")


def canonical_number(raw: str) -> str | None:
    """`$1,250.50` -> '1250.5'; None if not a number."""
    cleaned = raw.replace("$", "").replace(",", "").strip()
    try:
        number = float(cleaned)
    except ValueError:
        return None
    if number != number or number in (float("inf"), float("-inf")):
        return None
    return str(int(number)) if number.is_integer() else repr(number)


def _trivial(canonical: str) -> bool:
    try:
        number = float(canonical)
    except ValueError:
        return False
    return number.is_integer() and abs(number) <= 10


def _iso(year: int, month: int, day: int) -> str | None:
    try:
        return date(year, month, day).isoformat()
    except ValueError:
        return None


def as_date(text: str) -> str | None:
    """An ISO day for a string that is a date (ISO or M/D/YYYY), else None."""
    text = text.strip()
    m = _ISO.fullmatch(text)
    if m:
        return _iso(int(m[1]), int(m[2]), int(m[3]))
    m = _US.fullmatch(text)
    if m:
        return _iso(int(m[3]), int(m[1]), int(m[2]))
    return None


def dates_in(text: str) -> set[str]:
    """Every date written in `text`, as ISO days (ISO, 05/03/2026, May 3, 2026, 3 May 2026)."""
    found: set[str] = set()
    for m in _ISO.finditer(text):
        found.add(_iso(int(m[1]), int(m[2]), int(m[3])) or "")
    for m in _US.finditer(text):
        found.add(_iso(int(m[3]), int(m[1]), int(m[2])) or "")
    for m in _MDY.finditer(text):
        found.add(_iso(int(m[3]), _MONTHS[m[1].lower()], int(m[2])) or "")
    for m in _DMY.finditer(text):
        found.add(_iso(int(m[3]), _MONTHS[m[2].lower()], int(m[1])) or "")
    found.discard("")
    return found


def numbers_in(text: str) -> set[str]:
    found = set()
    for raw in _NUMBER_IN_TEXT.findall(text):
        canonical = canonical_number(raw.rstrip(","))
        if canonical is not None:
            found.add(canonical)
    return found


def extract_values(arguments: Any) -> list[Value]:
    """The checkable values of a call's arguments, depth first, at most MAX_VALUES."""
    found: list[Value] = []
    _walk(parse_arguments(arguments), "", found)
    return found[:MAX_VALUES]


def _walk(value: Any, path: str, found: list[Value]) -> None:
    if len(found) >= MAX_VALUES:
        return
    key = path.rsplit(".", 1)[-1].split("[", 1)[0]
    if isinstance(value, Mapping):
        for k, v in value.items():
            _walk(v, f"{path}.{k}" if path else str(k), found)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _walk(v, f"{path}[{i}]", found)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, (int, float)):
        canonical = canonical_number(str(value))
        if canonical is not None and not _trivial(canonical):
            found.append(Value(path, "number", canonical))
    elif isinstance(value, str):
        if key.lower() in FREE_TEXT_KEYS:
            return
        _string(value.strip(), path, found)


def _string(text: str, path: str, found: list[Value]) -> None:
    if not text:
        return
    if text[:1] in "{[":
        nested = parse_arguments(text)
        if isinstance(nested, (Mapping, list)):
            _walk(nested, path, found)
            return
    day = as_date(text)
    if day:
        found.append(Value(path, "date", day))
        return
    if _AMOUNT.match(text):
        canonical = canonical_number(text)
        if canonical is not None and not _trivial(canonical):
            found.append(Value(path, "number", canonical))
        return
    if any(c.isdigit() for c in text):
        if not any(c.isspace() for c in text) and len(text) >= 3:
            found.append(Value(path, "id", text.lower()))
        elif len(text) <= 80:
            for token in _ID_IN_PHRASE.findall(text):
                token = token.strip(".,:/-")
                if len(token) >= 3 or (token.isdigit() and len(token) >= 2):
                    found.append(Value(path, "id", token.lower(), part=True))
        return
    if len(text) <= 40 and len(text.split()) <= 4:
        found.append(Value(path, "option", text.lower()))


# --- Evidence -------------------------------------------------------------------
@dataclass
class Channels:
    """The conversation's text by who wrote it. A channel's numbers and dates
    are read the first time a value is looked up there: most values are found
    in the user's or a tool's text, so the long system text is seldom scanned
    (bench/formations.py)."""

    user: str = ""
    tool: str = ""
    assistant: str = ""
    system: str = ""
    _numbers: dict[str, set[str]] = field(default_factory=dict)
    _dates: dict[str, set[str]] = field(default_factory=dict)

    def texts(self) -> dict[str, str]:
        return {"user": self.user, "tool": self.tool, "assistant": self.assistant, "system": self.system}

    def numbers(self, channel: str) -> set[str]:
        if channel not in self._numbers:
            self._numbers[channel] = numbers_in(self.texts()[channel])
        return self._numbers[channel]

    def dates(self, channel: str) -> set[str]:
        if channel not in self._dates:
            self._dates[channel] = dates_in(self.texts()[channel])
        return self._dates[channel]


def channels_of(messages: Sequence[Any]) -> Channels:
    parts: dict[str, list[str]] = {"user": [], "tool": [], "assistant": [], "system": []}
    for m in messages:
        if not isinstance(m, Mapping):
            continue
        role = m.get("role")
        channel = "system" if role in SYSTEM_ROLES else role
        if channel in parts:
            parts[str(channel)].append(text_of(m.get("content")))
    joined = {k: "\n".join(v).lower() for k, v in parts.items()}
    return Channels(user=joined["user"], tool=joined["tool"], assistant=joined["assistant"], system=joined["system"])


def _whole_token(needle: str, haystack: str) -> bool:
    if not needle:
        return False
    pattern = rf"(?<![a-z0-9]){re.escape(needle)}(?![a-z0-9])"
    return re.search(pattern, haystack) is not None


def found_in(value: Value, channel: str, channels: Channels) -> bool:
    text = channels.texts()[channel]
    if value.kind == "number":
        return value.text in channels.numbers(channel)
    if value.kind == "date":
        return value.text in channels.dates(channel) or _whole_token(value.text, text)
    if _whole_token(value.text, text):
        return True
    if value.kind == "option":
        spaced = value.text.replace("_", " ").replace("-", " ")
        return spaced != value.text and _whole_token(spaced, text)
    return False


def grade(value: Value, channels: Channels) -> str:
    """`strong` (the user or a tool said it), `weak` (only the assistant or the system text), `none`."""
    if found_in(value, "user", channels) or found_in(value, "tool", channels):
        return "strong"
    if found_in(value, "assistant", channels) or found_in(value, "system", channels):
        return "weak"
    return "none"


def where(value: Value, channels: Channels) -> str:
    for channel, said in (("user", "stated by the user"), ("tool", "returned by a tool")):
        if found_in(value, channel, channels):
            return said
    if found_in(value, "assistant", channels):
        return "only in the assistant's messages"
    if found_in(value, "system", channels):
        return "only in the instructions"
    return "not found in the conversation"


def signature(name: str, arguments: Any) -> str:
    """First 16 hex of SHA-256(name NUL canonical JSON of the arguments)."""
    parsed = parse_arguments(arguments)
    try:
        canonical = orjson.dumps(parsed, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        canonical = repr(parsed).encode()
    return hashlib.sha256(name.encode() + b"\0" + canonical).hexdigest()[:16]
