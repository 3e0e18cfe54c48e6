"""Tool calls written as text, turned into structured `tool_calls`.

Some open models (Hermes- and Qwen-style chat templates, served by a runtime
that does not parse them) answer a request that declares tools with literal
blocks in their text:

    <tool_call>
    {"name": "get_order", "arguments": {"order_id": "#W1"}}
    </tool_call>

An OpenAI client sees no tool call in that. When the request declared
`tools`, each block that holds a JSON object with a string `name` becomes a
structured call (`arguments` as a JSON string, as OpenAI sends it), and the
choice's finish_reason becomes `tool_calls`. Everything else is left as it
came: structured tool_call deltas, blocks that are not JSON (kept as text),
and every event of a stream without a `<`.

`normalise_reply` works on a whole chat.completion; `StreamNormaliser` on a
stream's events, holding back only text that may be the start of a block."""
from __future__ import annotations

import json
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_MARKERS = (b"<", b"\\u003c", b"\\u003C")  # a `<` as JSON may spell it


def wanted(body: dict[str, Any]) -> bool:
    """Normalise only for requests that declared tools."""
    tools = body.get("tools")
    return isinstance(tools, list) and bool(tools)


def _call(block: str) -> dict[str, Any] | None:
    """A structured call from the text between the tags, or None."""
    try:
        parsed = json.loads(block)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("name"), str) or not parsed["name"]:
        return None
    arguments = parsed.get("arguments", parsed.get("parameters", {}))
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": {"name": parsed["name"], "arguments": arguments}}


def _held_prefix(text: str) -> int:
    """Length of the longest end of `text` that could begin `<tool_call>`."""
    for size in range(min(len(OPEN) - 1, len(text)), 0, -1):
        if OPEN.startswith(text[-size:]):
            return size
    return 0


@dataclass
class _Scanner:
    """Text in, (text to show, calls found) out, across any number of pieces."""

    held: str = ""
    inside: bool = False

    def feed(self, text: str) -> tuple[str, list[dict[str, Any]]]:
        buffer, shown, calls = self.held + text, [], []
        self.held = ""
        while buffer:
            if not self.inside:
                start = buffer.find(OPEN)
                if start == -1:
                    keep = _held_prefix(buffer)
                    shown.append(buffer[: len(buffer) - keep])
                    self.held = buffer[len(buffer) - keep :]
                    break
                shown.append(buffer[:start])
                buffer, self.inside = buffer[start + len(OPEN) :], True
            else:
                end = buffer.find(CLOSE)
                if end == -1:
                    self.held = buffer
                    break
                block, buffer, self.inside = buffer[:end], buffer[end + len(CLOSE) :], False
                call = _call(block)
                if call is None:
                    shown.append(OPEN + block + CLOSE)  # not a call: the text as it was
                else:
                    calls.append(call)
        return "".join(shown), calls

    def flush(self) -> str:
        """What is still held, as text (an unfinished block stays text)."""
        text = (OPEN if self.inside else "") + self.held
        self.held, self.inside = "", False
        return text


def normalise_reply(payload: dict[str, Any]) -> bool:
    """Convert text tool calls of a chat.completion in place; True if any was."""
    converted = False
    for choice in payload.get("choices") or ():
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict) or message.get("tool_calls") or not isinstance(message.get("content"), str):
            continue
        if OPEN not in message["content"]:
            continue
        scanner = _Scanner()
        text, calls = scanner.feed(message["content"])
        text += scanner.flush()
        if calls:
            message["content"] = text.strip() or None
            message["tool_calls"] = calls
            choice["finish_reason"] = "tool_calls"
            converted = True
    return converted


def _event(chunk: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"


@dataclass
class StreamNormaliser:
    """Rewrites a stream's events (whole `data: …\\n\\n` events, [DONE] excluded)."""

    scanners: dict[int, _Scanner] = field(default_factory=dict)
    calls: dict[int, int] = field(default_factory=dict)  # choice index -> calls sent

    def _active(self) -> bool:
        return bool(self.calls) or any(s.held or s.inside for s in self.scanners.values())

    def events(self, event: bytes) -> list[bytes]:
        if not event.startswith(b"data:") or not (self._active() or any(m in event for m in _MARKERS)):
            return [event]
        try:
            chunk = json.loads(event[5:])
        except ValueError:
            return [event]
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        if not isinstance(choices, list) or not choices:
            return [event]  # e.g. the usage chunk after the finish
        base = {k: v for k, v in chunk.items() if k != "choices"}
        out: list[bytes] = []
        for choice in choices:
            if not isinstance(choice, dict):
                out.append(_event({**base, "choices": [choice]}))
                continue
            out += self._choice(base, choice)
        return out

    def _choice(self, base: dict[str, Any], choice: dict[str, Any]) -> list[bytes]:
        """One choice's delta as events: its text, the calls found, its finish."""
        index = choice["index"] if isinstance(choice.get("index"), int) else 0
        delta = dict(choice["delta"]) if isinstance(choice.get("delta"), dict) else {}
        scanner = self.scanners.setdefault(index, _Scanner())
        calls: list[dict[str, Any]] = []
        if isinstance(delta.get("content"), str):
            delta["content"], calls = scanner.feed(delta["content"])
        finish = choice.get("finish_reason")
        if finish is not None:
            held = scanner.flush()
            if held:
                delta["content"] = delta.get("content", "") + held
        out = []
        if delta.get("content") or set(delta) - {"content"}:
            out.append(_event({**base, "choices": [{**choice, "delta": delta, "finish_reason": None}]}))
        for call in calls:
            position = self.calls.get(index, 0)
            self.calls[index] = position + 1
            piece = {"index": index, "delta": {"tool_calls": [{"index": position, **call}]}, "finish_reason": None}
            out.append(_event({**base, "choices": [piece]}))
        if finish is not None:
            if finish == "stop" and self.calls.get(index):
                finish = "tool_calls"
            out.append(_event({**base, "choices": [{**choice, "delta": {}, "finish_reason": finish}]}))
        return out

    def flush(self) -> list[bytes]:
        """Text still held when a stream ends without a finish chunk."""
        out = []
        for index, scanner in self.scanners.items():
            text = scanner.flush()
            if text:
                chunk = {"object": "chat.completion.chunk", "choices": [{"index": index, "delta": {"content": text}, "finish_reason": None}]}
                out.append(_event(chunk))
        return out


async def normalise_stream(events: AsyncGenerator[bytes, None]) -> AsyncGenerator[bytes, None]:
    """`events` with text tool calls turned into structured deltas. Closing
    this closes `events` at once (a client gone cancels the upstream call)."""
    normaliser = StreamNormaliser()
    try:
        async for event in events:
            for out in normaliser.events(event):
                yield out
        for out in normaliser.flush():
            yield out
    finally:
        await events.aclose()
