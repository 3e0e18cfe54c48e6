"""Responses API <-> chat completions, for providers without /responses.

`to_chat` turns a Responses request into a chat completion request;
`to_response` turns the chat completion back into a `response` object, and
`to_events` a chat stream into the Responses stream events the official
clients read (`response.created`, `response.in_progress`, output items and
content parts added and done, `response.output_text.delta`,
`response.function_call_arguments.delta` / `.done`, then
`response.completed` or `response.incomplete` with usage).

Only what a chat completion can say honestly is translated: text and image
input, function tools and their calls and outputs, instructions, the
sampling and length settings, reasoning effort and structured output. What
needs state or tools only OpenAI runs (`previous_response_id`, built-in
tools such as web search, file inputs) is a 400 saying so."""
from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncGenerator
from typing import Any

from passthru.doors.common import event_data, loads, sse
from passthru.errors import ApiError

_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
# Request fields that change nothing a chat completion would answer: left out.
_IGNORED = frozenset({"store", "include", "truncation", "metadata", "background", "service_tier", "prompt_cache_key"})
_COPIED = ("temperature", "top_p", "parallel_tool_calls", "user", "seed", "top_logprobs")
_HANDLED = frozenset(
    {"model", "input", "instructions", "tools", "tool_choice", "max_output_tokens", "reasoning", "text", "stream",
     "stream_options", *_COPIED, *_IGNORED}
)


def _unsupported(what: str, param: str) -> ApiError:
    return ApiError(
        400,
        f"{what} is not supported on /v1/responses for this model's provider (its requests are translated to "
        "chat completions): use a provider that serves the Responses API (openai/…, openrouter/…), or "
        "POST /v1/chat/completions.",
        code="unsupported_parameter",
        param=param,
    )


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The chat completion request a Responses request amounts to."""
    for name in body:
        if name not in _HANDLED:
            raise _unsupported(f"'{name}'", name)
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    messages += _messages(body.get("input"))
    if not messages:
        raise ApiError(400, "'input' is required.", param="input")
    chat: dict[str, Any] = {"model": body["model"], "messages": messages}
    for name in _COPIED:
        if name in body:
            chat[name] = body[name]
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and reasoning.get("effort"):
        chat["reasoning_effort"] = reasoning["effort"]
    if body.get("tools"):
        chat["tools"] = [_tool(t, i) for i, t in enumerate(body["tools"])]
    if "tool_choice" in body:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    text_format = (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) else None
    if isinstance(text_format, dict) and text_format.get("type") == "json_schema":
        schema = {k: text_format[k] for k in ("name", "schema", "strict", "description") if k in text_format}
        chat["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif isinstance(text_format, dict) and text_format.get("type") == "json_object":
        chat["response_format"] = {"type": "json_object"}
    if body.get("stream") is True:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}  # the usage response.completed reports
    return chat


def _messages(items: Any) -> list[dict[str, Any]]:
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise ApiError(400, "'input' must be a string or an array of input items.", param="input")
    out: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ApiError(400, f"input[{i}] must be an object.", param=f"input[{i}]")
        kind = item.get("type", "message")
        if kind == "message":
            role = _ROLES.get(item.get("role", ""))
            if role is None:
                raise ApiError(400, f"input[{i}].role must be user, assistant, system or developer.", param=f"input[{i}].role")
            out.append({"role": role, "content": _content(item.get("content"), role, i)})
        elif kind == "function_call":
            call = {
                "id": item.get("call_id") or item.get("id"),
                "type": "function",
                "function": {"name": item.get("name", ""), "arguments": item.get("arguments", "")},
            }
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)  # one assistant turn: its text and its calls
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _text_of(output)
            out.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": text})
        elif kind == "reasoning":
            continue  # the provider's own reasoning summary: not chat input
        else:
            raise _unsupported(f"The input item type '{kind}'", f"input[{i}]")
    return out


def _text_of(parts: Any) -> str:
    if not isinstance(parts, list):
        return "" if parts is None else json.dumps(parts)
    return "".join(p.get("text", "") for p in parts if isinstance(p, dict))


def _content(content: Any, role: str, i: int) -> Any:
    if isinstance(content, str) or content is None:
        return content or ""
    if not isinstance(content, list):
        raise ApiError(400, f"input[{i}].content must be a string or an array.", param=f"input[{i}].content")
    if role != "user":
        return _text_of(content)
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": part.get("text", "")})
        elif kind == "input_image" and part.get("image_url"):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"], "detail": part.get("detail", "auto")}})
        else:
            raise _unsupported(f"The content part '{kind}'", f"input[{i}].content")
    return parts


def _tool(tool: Any, i: int) -> dict[str, Any]:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        kind = tool.get("type") if isinstance(tool, dict) else tool
        raise _unsupported(f"The tool type '{kind}'", f"tools[{i}]")
    function = {k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool and tool[k] is not None}
    return {"type": "function", "function": function}


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    if isinstance(choice, str):
        return choice
    raise _unsupported("This 'tool_choice'", "tool_choice")


def conversation_of(body: dict[str, Any]) -> dict[str, Any]:
    """What kernel.conversation.identify reads (the seed, the system texts, the
    opening messages) of the chat request a Responses request amounts to,
    without translating the rest: cheap enough for every native call too."""
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    items = body.get("input")
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
    elif isinstance(items, list):
        for item in items:
            if not isinstance(item, dict):
                continue
            kind = item.get("type", "message")
            if kind == "message":
                messages.append({"role": _ROLES.get(item.get("role", ""), "user"), "content": item.get("content")})
            elif kind == "function_call":
                messages.append({"role": "assistant", "content": None})
            elif kind == "function_call_output":
                messages.append({"role": "tool", "content": item.get("output")})
    return {"seed": body.get("seed"), "messages": messages}


# --- chat completion -> response ----------------------------------------------


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def response_usage(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    prompt, completion = usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": usage.get("total_tokens") or prompt + completion,
    }


def _shell(request: dict[str, Any], resp_id: str, created: int, status: str, output: list[dict[str, Any]],
           usage: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
    reasoning = request.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    incomplete = None
    if status == "incomplete":
        incomplete = {"reason": "content_filter" if finish == "content_filter" else "max_output_tokens"}
    return {
        "id": resp_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": None,
        "incomplete_details": incomplete,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "model": request["model"],
        "output": output,
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": None,
        "reasoning": {"effort": effort, "summary": None},
        "store": False,
        "temperature": request.get("temperature", 1.0),
        "text": request.get("text") or {"format": {"type": "text"}},
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools") or [],
        "top_p": request.get("top_p", 1.0),
        "truncation": "disabled",
        "usage": usage,
        "user": request.get("user"),
        "metadata": request.get("metadata") or {},
    }


def _status(finish: str | None) -> str:
    return "incomplete" if finish in ("length", "content_filter") else "completed"


def _message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}] if status == "completed" else []
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": content}


def _call_item(item_id: str, call_id: str, name: str, arguments: str, status: str = "completed") -> dict[str, Any]:
    return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name, "arguments": arguments, "status": status}


def to_response(payload: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    """The `response` object for a chat completion."""
    choices = payload.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    output: list[dict[str, Any]] = []
    content = message.get("content")
    text = content if isinstance(content, str) else _text_of(content)
    if text:
        output.append(_message_item(_id("msg"), text))
    if message.get("refusal"):
        output.append({
            "type": "message", "id": _id("msg"), "status": "completed", "role": "assistant",
            "content": [{"type": "refusal", "refusal": message["refusal"]}],
        })
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        output.append(_call_item(_id("fc"), call.get("id") or _id("call"), function.get("name", ""), function.get("arguments", "")))
    finish = choice.get("finish_reason")
    stamp = payload.get("created")
    created = stamp if isinstance(stamp, int) else int(time.time())
    return _shell(request, _id("resp"), created, _status(finish), output, response_usage(payload.get("usage")), finish)


# --- chat stream -> Responses events ----------------------------------------------


class _Events:
    """Numbers the events (`sequence_number`) and names them."""

    def __init__(self) -> None:
        self.seq = 0

    def __call__(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return sse(kind, payload)


def _chunk(event: bytes) -> dict[str, Any] | None:
    """A chat stream event's chunk, or None for [DONE] and anything that is not a JSON object."""
    data = event_data(event)
    if not data or data == b"[DONE]":
        return None
    try:
        chunk = loads(data)
    except ValueError:
        return None
    return chunk if isinstance(chunk, dict) else None


async def to_events(events: AsyncGenerator[bytes, None], request: dict[str, Any]) -> AsyncGenerator[bytes, None]:
    """The Responses stream for a chat stream (which carries its usage chunk: `to_chat` asks for it)."""
    emit = _Events()
    resp_id, created = _id("resp"), int(time.time())
    yield emit("response.created", response=_shell(request, resp_id, created, "in_progress", [], None))
    yield emit("response.in_progress", response=_shell(request, resp_id, created, "in_progress", [], None))
    items: list[dict[str, Any]] = []  # output items in order, finished when the stream ends
    text: dict[str, Any] | None = None  # the open message item: {"item", "index", "text"}
    calls: dict[int, dict[str, Any]] = {}  # tool call index -> {"item", "index"}
    usage: Any = None
    finish: str | None = None
    try:
        async for event in events:
            chunk = _chunk(event)
            if chunk is None:
                continue
            if isinstance(chunk.get("error"), dict) and not chunk.get("choices"):
                error = chunk["error"]
                yield emit("error", code=error.get("code"), message=error.get("message", ""), param=error.get("param"))
                continue
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk.get("choices") or ():
                if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                    continue
                delta = choice.get("delta") or {}
                piece = delta.get("content")
                if isinstance(piece, str) and piece:
                    if text is None:
                        item = _message_item(_id("msg"), "", "in_progress")
                        text = {"item": item, "index": len(items), "text": ""}
                        items.append(item)
                        yield emit("response.output_item.added", output_index=text["index"], item=item)
                        yield emit(
                            "response.content_part.added", item_id=item["id"], output_index=text["index"], content_index=0,
                            part={"type": "output_text", "text": "", "annotations": []},
                        )
                    text["text"] += piece
                    yield emit(
                        "response.output_text.delta", item_id=text["item"]["id"], output_index=text["index"],
                        content_index=0, delta=piece, logprobs=[],
                    )
                for call in delta.get("tool_calls") or ():
                    position = call.get("index", 0) if isinstance(call, dict) else 0
                    function = (call.get("function") if isinstance(call, dict) else None) or {}
                    open_call = calls.get(position)
                    if open_call is None:
                        item_id = _id("fc")
                        item = _call_item(item_id, call.get("id") or item_id, function.get("name") or "", "", "in_progress")
                        open_call = calls[position] = {"item": item, "index": len(items)}
                        items.append(item)
                        yield emit("response.output_item.added", output_index=open_call["index"], item=dict(item))
                    arguments = function.get("arguments")
                    if isinstance(arguments, str) and arguments:
                        open_call["item"]["arguments"] += arguments
                        yield emit(
                            "response.function_call_arguments.delta", item_id=open_call["item"]["id"],
                            output_index=open_call["index"], delta=arguments,
                        )
                if choice.get("finish_reason"):
                    finish = choice["finish_reason"]
    finally:
        await events.aclose()  # a client that left: calls.py drains and meters the upstream
    if text is not None:
        item, index = text["item"], text["index"]
        part = {"type": "output_text", "text": text["text"], "annotations": []}
        yield emit("response.output_text.done", item_id=item["id"], output_index=index, content_index=0, text=text["text"], logprobs=[])
        yield emit("response.content_part.done", item_id=item["id"], output_index=index, content_index=0, part=part)
        item.update(status="completed", content=[part])
        yield emit("response.output_item.done", output_index=index, item=item)
    for open_call in calls.values():
        item, index = open_call["item"], open_call["index"]
        yield emit("response.function_call_arguments.done", item_id=item["id"], output_index=index, arguments=item["arguments"])
        item["status"] = "completed"
        yield emit("response.output_item.done", output_index=index, item=item)
    status = _status(finish)
    final = _shell(request, resp_id, created, status, items, response_usage(usage), finish)
    yield emit(f"response.{status}", response=final)
