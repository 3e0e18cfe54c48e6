"""The import key: a SHA-256 over a JSON document's content, not its bytes.

A results file imported from disk and the same file uploaded inside a JSON
body (`POST /v1/benchmarks/runs`, re-serialised by the harness: other
indentation, escapes, number spelling) must be one run. So the key hashes the
document's parse events in order: keys, strings as text, numbers as the value
they denote, structure. Streaming, like the τ² reader it rides along with, so
a 1 GB file costs no memory; `of_value` gives the same key for the document
already parsed (json.loads keeps the key order).

Key order counts: every JSON writer we know of (Python's, pydantic's,
JavaScript's for non-numeric keys) keeps it, and sorting would need the whole
document in memory."""
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from typing import Any

_CODES = {
    "start_map": "{", "end_map": "}", "start_array": "[", "end_array": "]", "map_key": "k",
    "string": "s", "number": "n", "boolean": "b", "null": "z",
}  # fmt: skip
_FLUSH = 4096  # events per hash update: one update per event would cost as much as the parse


class ContentHash:
    """Feed ijson's (prefix, event, value) events through `events`; then `hexdigest`."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._parts: list[str] = []

    def events(self, events: Iterable[tuple[str, str, Any]]) -> Iterator[tuple[str, str, Any]]:
        parts = self._parts
        for item in events:
            _, event, value = item
            if event == "string" or event == "map_key":
                parts.append(f"{_CODES[event]}{len(value)}:{value}")
            elif event == "number":
                # ints stay ints; a float is its shortest repr, however the file spelled it
                parts.append(f"n{value!r}" if isinstance(value, int) else f"n{float(value)!r}")
            elif event == "boolean":
                parts.append("b1" if value else "b0")
            else:
                parts.append(_CODES[event])
            if len(parts) >= _FLUSH:
                self._flush()
            yield item

    def _flush(self) -> None:
        self._hash.update("\x00".join(self._parts).encode("utf-8", "surrogatepass"))
        self._hash.update(b"\x00")
        self._parts.clear()

    def hexdigest(self) -> str:
        if self._parts:
            self._flush()
        return self._hash.hexdigest()


def _walk(value: Any) -> Iterator[tuple[str, str, Any]]:
    """ijson's events for a parsed value (prefixes left blank: the hash ignores them)."""
    if isinstance(value, dict):
        yield "", "start_map", None
        for key, item in value.items():
            yield "", "map_key", key
            yield from _walk(item)
        yield "", "end_map", None
    elif isinstance(value, list):
        yield "", "start_array", None
        for item in value:
            yield from _walk(item)
        yield "", "end_array", None
    elif isinstance(value, str):
        yield "", "string", value
    elif isinstance(value, bool):
        yield "", "boolean", value
    elif value is None:
        yield "", "null", None
    else:
        yield "", "number", value


def of_value(value: Any) -> str:
    """The key of a document already parsed (json.loads), equal to the streamed file's."""
    hasher = ContentHash()
    for _ in hasher.events(_walk(value)):
        pass
    return hasher.hexdigest()
