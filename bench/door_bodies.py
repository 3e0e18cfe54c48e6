"""The τ²-sized request (bench/tau2_body.py) as each other /v1 door takes it,
and the fake upstream's canned answers on those doors (bench/fake_upstream.py).

- /v1/responses: the same conversation as Responses input items (instructions,
  messages, function_call and function_call_output items, flat function tools);
- /v1/messages: as Anthropic's Messages API (system, text, tool_use and
  tool_result blocks, input_schema tools), the system prompt marked for caching;
- /v1/embeddings: the policy text and the last user turn as two inputs."""
from __future__ import annotations

import json
from typing import Any

import tau2_body

PROMPT_TOKENS = 4800
COMPLETION_TOKENS = 48
TEXT = "I have found your reservation 4WQ150 from JFK to SEA on May 20 in economy, with two passengers."


def responses_body(model: str, *, stream: bool = False) -> dict[str, Any]:
    chat = tau2_body.body(model, stream=stream)
    items: list[dict[str, Any]] = []
    for m in chat["messages"][1:]:
        if m["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
        elif m.get("tool_calls"):
            for call in m["tool_calls"]:
                f = call["function"]
                items.append({"type": "function_call", "call_id": call["id"], "name": f["name"], "arguments": f["arguments"]})
        else:
            items.append({"role": m["role"], "content": m["content"]})
    body: dict[str, Any] = {
        "model": model,
        "instructions": chat["messages"][0]["content"],
        "input": items,
        "tools": [{"type": "function", **t["function"]} for t in chat["tools"]],
        "temperature": 0.0,
    }
    if stream:
        body["stream"] = True
    return body


def messages_body(model: str, *, stream: bool = False) -> dict[str, Any]:
    chat = tau2_body.body(model, stream=stream)
    turns: list[dict[str, Any]] = []
    for m in chat["messages"][1:]:
        if m["role"] == "tool":
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}
            turns.append({"role": "user", "content": [block]})
        elif m.get("tool_calls"):
            uses = [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"], "input": json.loads(c["function"]["arguments"])}
                    for c in m["tool_calls"]]
            turns.append({"role": "assistant", "content": uses})
        else:
            turns.append({"role": m["role"], "content": m["content"]})
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": 1024,
        "system": [{"type": "text", "text": chat["messages"][0]["content"], "cache_control": {"type": "ephemeral"}}],
        "messages": turns,
        "tools": [{"name": t["function"]["name"], "description": t["function"]["description"],
                   "input_schema": t["function"]["parameters"]} for t in chat["tools"]],
    }
    if stream:
        body["stream"] = True
    return body


def embeddings_body(model: str) -> dict[str, Any]:
    chat = tau2_body.body(model)
    return {"model": model, "input": [chat["messages"][0]["content"], chat["messages"][-1]["content"]]}


# --- The fake upstream's answers ----------------------------------------------


def _pieces(chunks: int) -> list[str]:
    per = max(1, len(TEXT) // chunks)
    return [TEXT[i * per : (i + 1) * per] if i < chunks - 1 else TEXT[i * per :] for i in range(chunks)]


def _response(status: str = "completed", with_output: bool = True) -> dict[str, Any]:
    item = {"type": "message", "id": "msg_bench", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": TEXT, "annotations": []}]}
    return {
        "id": "resp_bench", "object": "response", "created_at": 0, "status": status, "model": "gpt-4.1-mini",
        "output": [item] if with_output else [], "error": None, "incomplete_details": None,
        "usage": {"input_tokens": PROMPT_TOKENS, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": COMPLETION_TOKENS,
                  "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS}
        if with_output else None,
    }


def _named(kind: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + json.dumps({"type": kind, **payload}).encode() + b"\n\n"


def responses_plain() -> bytes:
    return json.dumps(_response()).encode()


def responses_events(chunks: int) -> list[bytes]:
    events = [_named("response.created", {"response": _response("in_progress", False)})]
    events.append(_named("response.output_item.added", {"output_index": 0, "item": {
        "type": "message", "id": "msg_bench", "status": "in_progress", "role": "assistant", "content": []}}))
    events += [_named("response.output_text.delta", {"item_id": "msg_bench", "output_index": 0, "content_index": 0, "delta": p})
               for p in _pieces(chunks)]
    events.append(_named("response.completed", {"response": _response()}))
    return events


def _message(output_tokens: int = COMPLETION_TOKENS) -> dict[str, Any]:
    return {
        "id": "msg_bench", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": TEXT}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 300, "output_tokens": output_tokens, "cache_read_input_tokens": PROMPT_TOKENS - 300,
                  "cache_creation_input_tokens": 0},
    }


def messages_plain() -> bytes:
    return json.dumps(_message()).encode()


def messages_events(chunks: int) -> list[bytes]:
    start = {**_message(1), "content": [], "stop_reason": None}
    events = [_named("message_start", {"message": start}),
              _named("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})]
    events += [_named("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": p}}) for p in _pieces(chunks)]
    events += [_named("content_block_stop", {"index": 0}),
               _named("message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                        "usage": {"output_tokens": COMPLETION_TOKENS}}),
               _named("message_stop", {})]
    return events


def embeddings_plain() -> bytes:
    data = [{"object": "embedding", "index": i, "embedding": [0.001 * j for j in range(256)]} for i in range(2)]
    return json.dumps({"object": "list", "data": data, "model": "text-embedding-3-small",
                       "usage": {"prompt_tokens": PROMPT_TOKENS, "total_tokens": PROMPT_TOKENS}}).encode()
