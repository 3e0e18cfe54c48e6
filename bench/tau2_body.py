"""A τ²-sized chat-completions body, generated deterministically.

τ²'s airline agent sends a long policy as its system prompt, the
conversation so far and its tool schemas on every turn. This reproduces the
shape and size: an ~8 KB policy, 10 messages (user, assistant with a tool call,
tool result, ...) and 12 tool schemas, about 19 KB of JSON in all."""
from __future__ import annotations

import json
import random
from typing import Any

_WORDS = (
    "agent must confirm the user identity before any change reservation flight cabin baggage policy "
    "refund certificate compensation cancel modify passenger payment membership gold silver regular "
    "insurance segment origin destination date economy basic business explicit confirmation tool call "
    "only one at a time transfer human representative deny request outside scope"
).split()


def _prose(rng: random.Random, size: int) -> str:
    out: list[str] = []
    length = 0
    while length < size:
        sentence = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 20))).capitalize() + "."
        out.append(sentence)
        length += len(sentence) + 1
    return " ".join(out)


def _tool(rng: random.Random, i: int) -> dict[str, Any]:
    props = {
        f"arg_{j}": {"type": rng.choice(["string", "integer", "boolean"]), "description": _prose(rng, 45)}
        for j in range(rng.randint(2, 5))
    }
    return {
        "type": "function",
        "function": {
            "name": f"tool_number_{i}",
            "description": _prose(rng, 120),
            "parameters": {"type": "object", "properties": props, "required": list(props)[:2]},
        },
    }


def body(model: str, *, stream: bool = False, seed: int = 2) -> dict[str, Any]:
    """The request body for `model` (stream=True asks for SSE)."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "# Airline agent policy\n" + _prose(rng, 8000)}]
    messages.append({"role": "assistant", "content": "Hi! How can I help you today?"})
    for turn in range(2):
        messages.append({"role": "user", "content": _prose(rng, 180)})
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{turn}",
                        "type": "function",
                        "function": {"name": f"tool_number_{turn}", "arguments": json.dumps({"user_id": "mia_li_3668"})},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"call_{turn}", "content": json.dumps({"result": _prose(rng, 200)})})
    messages.append({"role": "assistant", "content": _prose(rng, 160)})
    messages.append({"role": "user", "content": _prose(rng, 200)})
    payload: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "tools": [_tool(rng, i) for i in range(12)],
        "temperature": 0.0,
    }
    if stream:
        payload["stream"] = True
    return payload


def encoded(model: str, *, stream: bool = False) -> bytes:
    return json.dumps(body(model, stream=stream)).encode()


if __name__ == "__main__":
    raw = encoded("openai/gpt-4.1-mini")
    parsed = json.loads(raw)
    print(f"{len(raw)} bytes, {len(parsed['messages'])} messages, {len(parsed['tools'])} tools, "
          f"system prompt {len(parsed['messages'][0]['content'])} chars")
