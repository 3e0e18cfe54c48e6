"""Several providers on the one scripted upstream (tests/upstream.py), each
answering as it would: the key Marina sends tells which provider a request is
for, each provider knows only its own models (a 404 for any other, the way
Marina's fallback loop is told "not this provider"), and the reply has the
shape of the API asked for (chat completions, Responses, embeddings,
Anthropic's Messages; a stream when one was asked for).

    upstream.answer = ScriptedProviders({"sk-openai-…": "openai", …}).answer
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.upstream import Received, Reply, ScriptedUpstream, Sse, Step, completion, sse_chunks

# Which ids each provider serves (a made-up but plausible catalogue).
KNOWS: dict[str, Callable[[str], bool]] = {
    "anthropic": lambda model: model.startswith("claude"),
    "openai": lambda model: model.startswith(("gpt-", "o3", "o4", "text-embedding-")),
    "groq": lambda model: model.startswith("llama"),
    "mistral": lambda model: model.startswith("mistral"),
    "openrouter": lambda model: "/" in model,
}
USAGE = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}


def response_object(model: str, text: str = "Hi from Responses.") -> dict[str, Any]:
    return {
        "id": "resp_scripted", "object": "response", "created_at": 1700000000, "status": "completed",
        "error": None, "incomplete_details": None, "instructions": None, "model": model,
        "output": [{
            "type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }],
        "parallel_tool_calls": True, "temperature": 1.0, "tool_choice": "auto", "tools": [], "top_p": 1.0,
        "usage": {"input_tokens": 12, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
                  "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 17},
    }  # fmt: skip


def response_events(model: str, text: str = "Hi from Responses.") -> list[dict[str, Any]]:
    done = response_object(model, text)
    item = done["output"][0]
    events = [
        {"type": "response.created", "response": {**done, "status": "in_progress", "output": [], "usage": None}},
        {"type": "response.output_item.added", "output_index": 0, "item": {**item, "status": "in_progress", "content": []}},
        {"type": "response.content_part.added", "item_id": "msg_1", "output_index": 0, "content_index": 0,
         "part": {"type": "output_text", "text": "", "annotations": []}},
        {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": text},
        {"type": "response.completed", "response": done},
    ]  # fmt: skip
    return [{**e, "sequence_number": i} for i, e in enumerate(events)]


def anthropic_message(model: str, text: str = "Hello from Claude.") -> dict[str, Any]:
    return {
        "id": "msg_01", "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 5},
    }  # fmt: skip


def anthropic_events(model: str, text: str = "Streamed Claude.") -> list[dict[str, Any]]:
    start = {**anthropic_message(model), "content": [], "stop_reason": None}
    return [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": 5}},
        {"type": "message_stop"},
    ]


def embedding_list(model: str, count: int) -> dict[str, Any]:
    return {
        "object": "list", "model": model, "usage": {"prompt_tokens": 8, "total_tokens": 8},
        "data": [{"object": "embedding", "index": i, "embedding": [0.25, -0.5, 0.125]} for i in range(count)],
    }  # fmt: skip


def not_found(provider: str, model: str) -> Reply:
    if provider == "anthropic":
        return Reply(status=404, json={"type": "error", "error": {"type": "not_found_error", "message": f"model: {model}"}})
    error = {"message": f"The model `{model}` does not exist", "type": "invalid_request_error", "param": None, "code": "model_not_found"}
    return Reply(status=404, json={"error": error})


@dataclass
class ScriptedProviders:
    """`keys`: each provider key Marina is configured with -> that provider's name."""

    keys: dict[str, str]
    # What each request was for: (provider, path, model), in order.
    seen: list[tuple[str, str, str]] = field(default_factory=list)

    def provider_of(self, received: Received) -> str:
        sent = received.headers.get("x-api-key") or received.headers.get("authorization", "").removeprefix("Bearer ")
        return self.keys[sent]

    def answer(self, received: Received) -> Step | None:
        body = received.body if isinstance(received.body, dict) else {}
        model, stream = str(body.get("model")), body.get("stream") is True
        provider = self.provider_of(received)
        self.seen.append((provider, received.path, model))
        path = received.path
        # An embedding model is no chat model, nor the other way round (OpenAI answers 404 for either).
        if not KNOWS[provider](model) or ("embed" in model) != path.endswith("/embeddings"):
            return not_found(provider, model)
        if path.endswith("/embeddings"):
            inputs = body.get("input")
            return Reply(json=embedding_list(model, len(inputs) if isinstance(inputs, list) else 1))
        if path.endswith("/responses"):
            if stream:
                return Sse(chunks=response_events(model), usage=None, named=True, done=False)
            return Reply(json=response_object(model))
        if path.endswith("/messages"):
            if stream:
                return Sse(chunks=anthropic_events(model), usage=None, named=True, done=False)
            return Reply(json=anthropic_message(model))
        if stream:
            return Sse(chunks=sse_chunks(model=model), usage=USAGE)
        return Reply(json=completion(model=model))


def keyed(config: Any, upstream: ScriptedUpstream, *names: str) -> ScriptedProviders:
    """Key `names` (beside the test settings' openrouter) on the scripted upstream, each answering as itself."""
    providers = {name: dict(conf) for name, conf in config.MARINA_PROVIDERS.items()}
    for name in names:
        providers[name] = {"base_url": upstream.base_url, "api_key": f"sk-{name}-provider-key-55555", "key_env": f"{name.upper()}_API_KEY"}
    config.MARINA_PROVIDERS = providers
    world = ScriptedProviders({conf["api_key"]: name for name, conf in providers.items() if conf["api_key"]})
    upstream.answer = world.answer
    return world
