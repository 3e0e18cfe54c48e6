"""`stream: true` through a formation or a stack: the formation runs whole
(its steps are never streamed: a checker reviews a finished draft, and a
retry may replace it), then its final answer goes out as server-sent
chat.completion.chunk events, as a provider would have streamed it.

    role + content (+ reasoning fields)  ->  one chunk per tool call
    ->  finish_reason  ->  usage (when stream_options.include_usage)  ->  [DONE]

The headers (x-marina-verify, x-marina-obligations, cost, …) are those of the
non-streamed answer, since everything they report is known before the first
byte. An error (the agent's own 4xx/5xx relayed, or Marina's 400) goes out
as JSON with its status, as the passthru relays an upstream error to a
streaming client."""
from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from passthru.outbound import SSE, Outbound
from passthru.streaming import DONE, wants_usage

# Message fields other than content and tool_calls that a provider streams as deltas.
_EXTRA_DELTA_FIELDS = ("reasoning_content", "reasoning", "refusal")


def unstreamed(body: dict[str, Any]) -> dict[str, Any]:
    """The body the formation runs on: the same request, not streamed."""
    return {k: v for k, v in body.items() if k not in ("stream", "stream_options")}


def as_stream(out: Outbound, body: Mapping[str, Any]) -> Outbound:
    """The formation's JSON answer `out` as an SSE answer (errors stay JSON)."""
    if out.status != 200 or out.stream is not None:
        return out
    try:
        payload = json.loads(out.body)
    except ValueError:
        return out
    if not isinstance(payload, dict):
        return out
    events = [_event(chunk) for chunk in chunks(payload, include_usage=wants_usage(dict(body)))]
    return Outbound(200, {**out.headers, "cache-control": "no-cache"}, content_type=SSE, stream=_replay(events))


async def _replay(events: list[bytes]) -> AsyncIterator[bytes]:
    for event in events:
        yield event
    yield DONE


def _event(chunk: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"


def chunks(payload: Mapping[str, Any], *, include_usage: bool) -> list[dict[str, Any]]:
    """chat.completion -> the chat.completion.chunk objects that stream it."""
    base: dict[str, Any] = {
        "id": payload.get("id") or "chatcmpl-marina",
        "object": "chat.completion.chunk",
        "created": payload.get("created") or 0,
        "model": payload.get("model") or "",
    }
    if payload.get("system_fingerprint"):
        base["system_fingerprint"] = payload["system_fingerprint"]
    out: list[dict[str, Any]] = []
    choices = payload.get("choices")
    if not isinstance(choices, list):
        choices = []
    for position, choice in enumerate(c for c in choices if isinstance(c, Mapping)):
        index = choice.get("index", position)
        message = _mapping(choice.get("message"))
        calls = [c for c in message.get("tool_calls") or () if isinstance(c, Mapping)]
        first: dict[str, Any] = {"role": message.get("role") or "assistant", "content": message.get("content") or ""}
        if calls and not message.get("content"):
            first["content"] = None  # as OpenAI streams a reply that only calls tools
        first.update({k: message[k] for k in _EXTRA_DELTA_FIELDS if message.get(k) is not None})
        out.append({**base, "choices": [{"index": index, "delta": first, "finish_reason": None}]})
        for number, call in enumerate(calls):
            function = _mapping(call.get("function"))
            delta_call = {
                "index": number,
                "id": call.get("id"),
                "type": call.get("type") or "function",
                "function": {"name": function.get("name"), "arguments": function.get("arguments") or ""},
            }
            out.append({**base, "choices": [{"index": index, "delta": {"tool_calls": [delta_call]}, "finish_reason": None}]})
        finish = choice.get("finish_reason") or ("tool_calls" if calls else "stop")
        out.append({**base, "choices": [{"index": index, "delta": {}, "finish_reason": finish}]})
    if include_usage and isinstance(payload.get("usage"), Mapping):
        out.append({**base, "choices": [], "usage": payload["usage"]})
    return out


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
