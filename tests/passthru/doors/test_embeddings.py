"""POST /v1/embeddings with the real `openai` SDK: passed through, metered from usage, traced without the input."""
from __future__ import annotations

import json

import openai
import pytest
from genai_prices import Usage, calc_price

from kernel.money import to_nanousd
from ledger.models import SpendDaily, Trace
from tests.upstream import Reply


def embedding_reply(prompt_tokens: int, *, cost: float | None = None, vectors: int = 2) -> dict:
    usage: dict = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}
    if cost is not None:
        usage["cost"] = cost
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": [0.25, -0.5, float(i)]} for i in range(vectors)],
        "model": "text-embedding-3-small",
        "usage": usage,
    }


def test_embeddings_pass_through_priced_from_the_tables(openai_client, upstream, speakers):
    upstream.script(Reply(json=embedding_reply(1234)))
    raw = openai_client.embeddings.with_raw_response.create(
        model="openai/text-embedding-3-small", input=["secret input one", "two"], dimensions=3
    )
    reply = raw.parse()
    assert [d.embedding for d in reply.data] == [[0.25, -0.5, 0.0], [0.25, -0.5, 1.0]]
    sent = upstream.requests[0]
    assert sent.path == "/v1/embeddings"
    assert sent.body["model"] == "text-embedding-3-small" and sent.body["dimensions"] == 3
    assert sent.body["input"] == ["secret input one", "two"]
    assert sent.headers["authorization"] == "Bearer sk-openai-provider-key-55555"
    expected = to_nanousd(
        calc_price(Usage(input_tokens=1234, output_tokens=0), model_ref="text-embedding-3-small", provider_id="openai").total_price
    )
    assert expected > 0
    trace = Trace.objects.get(request_id=raw.headers["x-request-id"])
    assert (trace.path, trace.status, trace.http_status, trace.requested_model) == (
        "/v1/embeddings", "ok", 200, "openai/text-embedding-3-small"
    )
    span = trace.spans.get()
    assert (span.prompt_tokens, span.completion_tokens, span.cost_nanousd, span.cost_source) == (
        1234, 0, expected, "price_table"
    )
    assert raw.headers["x-marina-upstream-model"] == "openai/text-embedding-3-small"
    assert SpendDaily.objects.get().cost_nanousd == expected
    # Bodies are off: the input is nowhere in the trace.
    assert trace.body is None and span.body is None
    assert "secret input" not in json.dumps([trace.body, span.body, span.detail])


def test_embeddings_cost_reported_by_the_provider_and_bodies_when_on(openai_client, upstream, speakers):
    speakers.MARINA_TRACE_BODIES = True
    upstream.script(Reply(json=embedding_reply(10, cost=0.0000031)))
    raw = openai_client.embeddings.with_raw_response.create(model="openrouter/openai/text-embedding-3-small", input="hello")
    assert raw.headers["x-marina-cost-usd"] == "0.00000310"
    trace = Trace.objects.get(request_id=raw.headers["x-request-id"])
    span = trace.spans.get()
    assert (span.provider, span.cost_nanousd, span.cost_source) == ("openrouter", 3_100, "provider")
    assert trace.body["input"] == "hello" and span.body["request"]["input"] == "hello"


def test_embeddings_errors_are_openais_envelope(openai_client, upstream, speakers):
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client.embeddings.create(model="openai/text-embedding-3-small", input="x", extra_body={"stream": True})
    assert caught.value.body["param"] == "stream"
    upstream.script(Reply(status=404, json={"error": {"message": "no such model", "type": "invalid_request_error", "code": "model_not_found"}}))
    with pytest.raises(openai.NotFoundError):
        openai_client.embeddings.create(model="openai/nope", input="x")
    assert Trace.objects.filter(path="/v1/embeddings", status="error").count() == 2
