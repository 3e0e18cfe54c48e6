"""The real `openai` SDK against Marina in-process and the scripted upstream."""
from __future__ import annotations

from ledger.models import SpendDaily, Trace
from tests.upstream import Reply, Sse, completion, tool_call


def test_plain_completion_is_forwarded_metered_and_traced(openai_client, upstream):
    # The provider takes half a second: Marina's overhead must leave that out.
    upstream.script(Reply(json=completion("pong", prompt_tokens=100, completion_tokens=20, cost=0.00123), delay=0.5))
    raw = openai_client.chat.completions.with_raw_response.create(
        model="openrouter/openai/gpt-5.2",
        messages=[{"role": "user", "content": "ping"}],
        extra_body={"reasoning_effort": "high", "provider": {"order": ["x"]}},
    )
    reply = raw.parse()
    assert reply.choices[0].message.content == "pong"
    assert raw.headers["x-marina-upstream-model"] == "openrouter/openai/gpt-5.2"
    assert raw.headers["x-marina-cost-usd"] == "0.00123000"
    overhead = float(raw.headers["x-marina-overhead-ms"])
    sent = upstream.requests[0]
    assert sent.body["model"] == "openai/gpt-5.2"
    assert sent.body["reasoning_effort"] == "high"
    assert sent.body["provider"] == {"order": ["x"]}
    assert sent.headers["authorization"] == "Bearer sk-or-test-provider-key-9876543210"
    assert sent.headers["x-request-id"] == raw.headers["x-request-id"]

    trace = Trace.objects.get(request_id=raw.headers["x-request-id"])
    assert (trace.status, trace.http_status, trace.key_name) == ("ok", 200, "tester")
    assert overhead < 500 <= trace.duration_ms  # the upstream's wait is not overhead; it is in the duration
    assert overhead <= trace.overhead_ms  # measured again for the trace, a little later
    span = trace.spans.get()
    assert (span.provider, span.upstream_model, span.cost_source) == ("openrouter", "openai/gpt-5.2", "provider")
    assert (span.prompt_tokens, span.completion_tokens, span.cost_nanousd) == (100, 20, 1_230_000)
    row = SpendDaily.objects.get()
    assert (row.calls, row.errors, row.cost_nanousd, row.key_name) == (1, 0, 1_230_000, "tester")


def test_stream_relays_chunks_and_meters_the_usage_chunk(openai_client, upstream):
    upstream.script(Sse(usage={"prompt_tokens": 40, "completion_tokens": 8, "total_tokens": 48}))
    stream = openai_client.chat.completions.create(
        model="openrouter/openai/gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello there, streamed."
    assert all(c.usage is None for c in chunks), "Marina asked for usage itself, so the client must not see it"
    assert upstream.requests[0].body["stream_options"] == {"include_usage": True}
    span = Trace.objects.get().spans.get()
    assert (span.prompt_tokens, span.completion_tokens) == (40, 8)
    assert span.ttft_ms is not None
    assert span.cost_source == "price_table" and span.cost_nanousd > 0


def test_stream_keeps_usage_chunk_when_client_asked(openai_client, upstream):
    stream = openai_client.chat.completions.create(
        model="openrouter/openai/gpt-4o",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = [c.usage for c in stream if c.usage is not None]
    assert usage and usage[0].prompt_tokens == 12


def test_tool_calls_pass_through(openai_client, upstream):
    upstream.script(Reply(json=completion(None, tool_calls=[tool_call("get_user_details", {"user_id": "u1"})])))
    tools = [{"type": "function", "function": {"name": "get_user_details", "parameters": {"type": "object"}}}]
    reply = openai_client.chat.completions.create(
        model="openrouter/openai/gpt-4o",
        messages=[{"role": "user", "content": "who am I"}],
        tools=tools,
        tool_choice="auto",
        parallel_tool_calls=False,
    )
    call = reply.choices[0].message.tool_calls[0]
    assert call.function.name == "get_user_details"
    body = upstream.requests[0].body
    assert body["tools"] == tools and body["tool_choice"] == "auto" and body["parallel_tool_calls"] is False
