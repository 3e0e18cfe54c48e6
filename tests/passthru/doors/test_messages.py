"""POST /v1/messages with the real `anthropic` SDK: passthru to anthropic and
openrouter/anthropic, cache reads and writes metered exactly, Anthropic's error envelope."""
from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from ledger.models import SpendDaily, Trace
from tests.conftest import MARINA_KEY, PROVIDER_KEY
from tests.in_process import InProcessMarina
from tests.upstream import Reply, Sse

if TYPE_CHECKING:
    # Imported in each case that uses it: at the top it would cost a second of every worker's collection.
    import anthropic

# Claude Sonnet 4.5's list prices, per million tokens: input 3, output 15,
# cache read 0.30, cache write (5 minutes) 3.75. 100 input, 5000 read, 2000
# written, 20 out: 300 + 1500 + 7500 + 300 = 9600 micro-dollars ($0.0096).
USAGE = {"input_tokens": 100, "output_tokens": 20, "cache_creation_input_tokens": 2000, "cache_read_input_tokens": 5000}
COST_NANOUSD = 9_600_000


def message(text: str = "Hello from Claude.", usage: dict | None = None) -> dict:
    return {
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": usage or USAGE,
    }


def message_events(text: str = "Streamed Claude.") -> list[dict]:
    start = {**message(usage={**USAGE, "output_tokens": 1}), "content": [], "stop_reason": None}
    return [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
        *({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}} for p in (text[:8], text[8:])),
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": 20}},
        {"type": "message_stop"},
    ]


SYSTEM = [{"type": "text", "text": "You are a support agent. " * 50, "cache_control": {"type": "ephemeral"}}]


@pytest.fixture
def anthropic_client(marina: InProcessMarina) -> anthropic.Anthropic:
    # Claude Code and the SDK take the base URL without /v1 and send the key as x-api-key.

    return marina.anthropic(api_key=MARINA_KEY, max_retries=0)


def test_create_passes_through_with_cache_control_and_meters_cache_tokens_exactly(anthropic_client, upstream, speakers):
    upstream.script(Reply(json=message()))
    raw = anthropic_client.messages.with_raw_response.create(
        model="anthropic/claude-sonnet-4-5", max_tokens=256, system=SYSTEM,
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"anthropic-beta": "prompt-caching-2024-07-31", "anthropic-version": "2023-06-01"},
    )
    reply = raw.parse()
    assert reply.content[0].text == "Hello from Claude."
    assert reply.usage.cache_read_input_tokens == 5000
    sent = upstream.requests[0]
    assert sent.path == "/v1/messages"
    assert sent.body["model"] == "claude-sonnet-4-5"
    assert sent.body["system"] == SYSTEM  # cache_control kept
    assert sent.headers["x-api-key"] == "sk-anthropic-provider-key-55555"
    assert "authorization" not in sent.headers and MARINA_KEY not in str(sent.headers)
    assert sent.headers["anthropic-version"] == "2023-06-01"  # the client's choice, forwarded
    assert sent.headers["anthropic-beta"] == "prompt-caching-2024-07-31"
    assert raw.headers["x-marina-cache-read-tokens"] == "5000"
    assert raw.headers["x-marina-cache-write-tokens"] == "2000"
    assert raw.headers["x-marina-cost-usd"] == "0.00960000"
    trace = Trace.objects.get(request_id=raw.headers["x-request-id"])
    assert (trace.path, trace.status, trace.key_name) == ("/v1/messages", "ok", "tester")
    span = trace.spans.get()
    assert (span.prompt_tokens, span.completion_tokens, span.cached_tokens) == (7100, 20, 5000)
    assert span.detail == {"cache_write_tokens": 2000}
    assert (span.cost_nanousd, span.cost_source) == (COST_NANOUSD, "price_table")
    assert SpendDaily.objects.get().cost_nanousd == COST_NANOUSD


def test_stream_is_relayed_and_metered_from_message_start_and_delta(anthropic_client, upstream, speakers):
    upstream.script(Sse(chunks=message_events(), usage=None, named=True, done=False))
    with anthropic_client.messages.stream(
        model="anthropic/claude-sonnet-4-5", max_tokens=256, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Streamed Claude."
    assert (final.usage.output_tokens, final.usage.cache_creation_input_tokens) == (20, 2000)
    trace = Trace.objects.get()
    assert trace.stream is True and trace.status == "ok"
    span = trace.spans.get()
    assert (span.prompt_tokens, span.completion_tokens, span.cached_tokens, span.cost_nanousd) == (7100, 20, 5000, COST_NANOUSD)
    assert span.ttft_ms is not None
    assert SpendDaily.objects.get().cost_nanousd == COST_NANOUSD


def test_bearer_key_and_openrouters_anthropic_models(marina, upstream, speakers):

    anthropic_client = marina.anthropic(auth_token=MARINA_KEY, max_retries=0)
    upstream.script(Reply(json=message(usage={**USAGE, "cost": 0.0123})))
    reply = anthropic_client.messages.create(
        model="openrouter/anthropic/claude-sonnet-4.5", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.content[0].text == "Hello from Claude."
    sent = upstream.requests[0]
    assert sent.body["model"] == "anthropic/claude-sonnet-4.5"
    assert sent.headers["authorization"] == f"Bearer {PROVIDER_KEY}" and "x-api-key" not in sent.headers
    span = Trace.objects.get().spans.get()
    assert (span.provider, span.cost_nanousd, span.cost_source) == ("openrouter", 12_300_000, "provider")


def test_errors_are_anthropics_envelope(marina, anthropic_client, upstream, speakers):
    import anthropic

    wrong = marina.anthropic(api_key="sk-marina-wrong-key-000000", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as caught:
        wrong.messages.create(model="anthropic/claude-sonnet-4-5", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.body == {"type": "error", "error": {"type": "authentication_error", "message": "Invalid API key."}}
    with pytest.raises(anthropic.BadRequestError) as refused:
        anthropic_client.messages.create(model="marina/verify:anthropic/claude-sonnet-4-5", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert refused.value.body["error"]["type"] == "invalid_request_error"
    assert "/v1/chat/completions" in refused.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as elsewhere:
        anthropic_client.messages.create(model="groq/llama-3.3-70b", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert "Messages API" in elsewhere.value.body["error"]["message"]
    assert upstream.requests == []
    upstream.script(Reply(status=529, json={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}))
    with pytest.raises(anthropic.APIStatusError) as overloaded:
        anthropic_client.messages.create(model="anthropic/claude-sonnet-4-5", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert overloaded.value.status_code == 529 and overloaded.value.body["error"]["type"] == "overloaded_error"
    assert Trace.objects.filter(path="/v1/messages", status="error").count() == 4


def test_wrong_method_and_missing_key_in_anthropics_envelope(marina, speakers):

    wrong = marina.http.get("/v1/messages", headers={"x-api-key": MARINA_KEY})
    assert (wrong.status_code, wrong.headers["allow"]) == (405, "POST")
    assert wrong.json()["type"] == "error" and wrong.json()["error"]["type"] == "invalid_request_error"
    keyless = marina.http.post("/v1/messages", json={"model": "anthropic/x", "max_tokens": 1, "messages": []})
    assert keyless.status_code == 401 and keyless.json()["error"]["type"] == "authentication_error"
    # x-api-key is Anthropic's way; on the OpenAI doors the key is a Bearer.
    other = marina.http.post("/v1/responses", json={"model": "openrouter/x", "input": "hi"}, headers={"x-api-key": MARINA_KEY})
    assert other.status_code == 401 and other.json()["error"]["code"] == "invalid_api_key"
