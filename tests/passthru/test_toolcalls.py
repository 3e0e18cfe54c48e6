"""Text tool calls (`<tool_call>{…}</tool_call>`) become structured ones,
streamed and not (passthru/toolcalls.py); structured deltas and replies
without blocks pass untouched; the usage chunk after the finish is forwarded;
the cache token headers."""
from __future__ import annotations

import json
from typing import Any

import pytest

from passthru.toolcalls import StreamNormaliser, normalise_reply
from tests.conftest import MARINA_KEY
from tests.upstream import Reply, Sse, completion, sse_chunks

MODEL = "openrouter/qwen/qwen3-8b"
HELLO = [{"role": "user", "content": "Where is order #W1?"}]
TOOLS = [{"type": "function", "function": {"name": "get_order", "parameters": {"type": "object"}}}]
BLOCK = '<tool_call>\n{"name": "get_order", "arguments": {"order_id": "#W1"}}\n</tool_call>'


def chunks_of(text_pieces: list[str], finish: str = "stop") -> list[dict[str, Any]]:
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "qwen"}
    out = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    out += [{**base, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in text_pieces]
    out.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return out


def run(normaliser: StreamNormaliser, chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    events = []
    for chunk in chunks:
        events += normaliser.events(b"data: " + json.dumps(chunk).encode())
    events += normaliser.flush()
    return [json.loads(e[5:]) for e in events]


def split_everywhere(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


@pytest.mark.parametrize("size", [1, 3, 7, 200])
def test_a_block_split_anywhere_becomes_one_structured_call(size):
    out = run(StreamNormaliser(), chunks_of(split_everywhere("Let me look. " + BLOCK, size)))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in out)
    assert text == "Let me look. "
    calls = [c["choices"][0]["delta"]["tool_calls"][0] for c in out if "tool_calls" in c["choices"][0]["delta"]]
    assert len(calls) == 1
    assert calls[0]["index"] == 0 and calls[0]["id"].startswith("call_") and calls[0]["type"] == "function"
    assert calls[0]["function"] == {"name": "get_order", "arguments": '{"order_id": "#W1"}'}
    assert out[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert all(c["id"] == "c1" and c["model"] == "qwen" for c in out)


def test_two_blocks_are_two_calls_with_their_own_indexes():
    second = BLOCK.replace("#W1", "#W2")
    out = run(StreamNormaliser(), chunks_of([BLOCK, "\n", second]))
    calls = [c["choices"][0]["delta"]["tool_calls"][0] for c in out if "tool_calls" in c["choices"][0]["delta"]]
    assert [c["index"] for c in calls] == [0, 1]
    assert json.loads(calls[1]["function"]["arguments"]) == {"order_id": "#W2"}


def test_text_with_a_lone_angle_bracket_is_not_held_and_text_without_one_is_byte_for_byte():
    normaliser = StreamNormaliser()
    events = [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks_of(["if a < b then", " go"])]
    first = normaliser.events(events[1])  # a `<` that starts no tag: passed on at once
    assert [json.loads(e[5:]) for e in first] == [json.loads(events[1][5:])]
    assert normaliser.events(events[2]) == [events[2]]  # no `<`, nothing held: byte for byte
    out = first + normaliser.events(events[2]) + normaliser.events(events[3])
    assert "".join(json.loads(e[5:])["choices"][0]["delta"].get("content", "") for e in out) == "if a < b then go"


def test_a_held_tag_prefix_that_is_not_a_tag_comes_out_as_text():
    out = run(StreamNormaliser(), chunks_of(["a <tool", "box> b"]))
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in out) == "a <toolbox> b"
    assert out[-1]["choices"][0]["finish_reason"] == "stop"


def test_an_unfinished_or_unparsable_block_stays_text():
    out = run(StreamNormaliser(), chunks_of(["<tool_call>{not json}</tool_call> and <tool_call>{\"name\": \"x\""]))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in out)
    assert text == '<tool_call>{not json}</tool_call> and <tool_call>{"name": "x"'
    assert out[-1]["choices"][0]["finish_reason"] == "stop"


def test_structured_deltas_pass_byte_for_byte():
    chunk = {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_9", "function": {"name": "f", "arguments": "{}"}}]}}]}
    event = b"data: " + json.dumps(chunk).encode()
    assert StreamNormaliser().events(event) == [event]


def test_normalise_reply_converts_and_leaves_the_rest():
    payload = completion("I will check.\n" + BLOCK)
    assert normalise_reply(payload)
    message = payload["choices"][0]["message"]
    assert message["content"] == "I will check."
    assert message["tool_calls"][0]["function"] == {"name": "get_order", "arguments": '{"order_id": "#W1"}'}
    assert payload["choices"][0]["finish_reason"] == "tool_calls"
    only = completion(BLOCK)
    normalise_reply(only)
    assert only["choices"][0]["message"]["content"] is None
    plain = completion("no calls here")
    assert not normalise_reply(plain) and "tool_calls" not in plain["choices"][0]["message"]


# --- Through Marina, with the openai SDK -----------------------------------------------
def test_plain_reply_with_a_text_block_arrives_as_a_tool_call(openai_client, upstream):
    upstream.script(Reply(json=completion(BLOCK)))
    reply = openai_client.chat.completions.create(model=MODEL, messages=HELLO, tools=TOOLS)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert choice.message.tool_calls[0].function.name == "get_order"
    assert json.loads(choice.message.tool_calls[0].function.arguments) == {"order_id": "#W1"}


def test_without_tools_in_the_request_the_reply_is_byte_for_byte(marina, upstream):
    raw = json.dumps(completion(BLOCK), indent=1).encode()
    upstream.script(Reply(raw=raw))
    response = marina.http.post(
        "/v1/chat/completions",
        headers={"authorization": f"Bearer {MARINA_KEY}"},
        json={"model": MODEL, "messages": HELLO},
        timeout=30,
    )
    assert response.content == raw


def test_streamed_text_block_arrives_as_a_tool_call_and_usage_follows(openai_client, upstream):
    pieces = split_everywhere("Checking. " + BLOCK, 5)
    usage = {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39}
    upstream.script(Sse(chunks=chunks_of(pieces), usage=usage))
    stream = openai_client.chat.completions.create(
        model=MODEL, messages=HELLO, tools=TOOLS, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Checking. "
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert len(calls) == 1 and calls[0].function.name == "get_order"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["tool_calls"]
    # The provider's usage chunk after the finish is forwarded, with no choices.
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == 30


def test_streamed_structured_tool_calls_are_relayed_untouched(marina, upstream):
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_order", "arguments": "{}"}}
    chunks = [
        {**base, "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    upstream.script(Sse(chunks=chunks))
    with marina.http.stream(
        "POST", "/v1/chat/completions", headers={"authorization": f"Bearer {MARINA_KEY}"},
        json={"model": MODEL, "messages": HELLO, "tools": TOOLS, "stream": True}, timeout=30,
    ) as response:
        body = response.read()
    for chunk in chunks:
        assert b"data: " + json.dumps(chunk).encode() + b"\n\n" in body


def test_plain_stream_text_is_unchanged(openai_client, upstream):
    upstream.script(Sse(chunks=sse_chunks("plain text <b>bold</b>")))
    stream = openai_client.chat.completions.create(model=MODEL, messages=HELLO, tools=TOOLS, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "plain text <b>bold</b>"


def test_cache_token_headers(openai_client, upstream):
    reply = completion("ok", prompt_tokens=3000, cached_tokens=2048)
    reply["usage"]["prompt_tokens_details"]["cache_write_tokens"] = 512
    upstream.script(Reply(json=reply), Reply(json=completion("no cache")))
    raw = openai_client.chat.completions.with_raw_response.create(model=MODEL, messages=HELLO)
    assert raw.headers["x-marina-cache-read-tokens"] == "2048"
    assert raw.headers["x-marina-cache-write-tokens"] == "512"
    bare = openai_client.chat.completions.with_raw_response.create(model=MODEL, messages=HELLO)
    assert "x-marina-cache-read-tokens" not in bare.headers and "x-marina-cache-write-tokens" not in bare.headers


def test_anthropic_dialect_cache_counts_are_read():
    from passthru.pricing import usage_from

    usage = usage_from({"prompt_tokens": 10, "completion_tokens": 2, "cache_read_input_tokens": 7, "cache_creation_input_tokens": 3})
    assert usage is not None and (usage.cached_tokens, usage.cache_write_tokens) == (7, 3)
