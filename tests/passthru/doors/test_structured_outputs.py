"""Structured outputs pass through every door unchanged, driven by the openai SDK's own parsers: the
`json_schema` response format (`strict`) that `beta.chat.completions.parse` builds from a pydantic
model reaches the upstream exactly as sent on /v1/chat/completions (τ²'s banking reranker makes this
call, `*_reranker` retrieval configs); `responses.parse`'s `text.format` reaches a Responses upstream
unchanged, and a chat-only one as the same schema in `response_format`; each answer parses back."""
from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from tests.passthru.doors.test_responses import response_object
from tests.upstream import Reply, completion


class Relevance(BaseModel):
    """As τ²'s pointwise LLM reranker asks for it."""

    relevant: bool
    score: int
    reason: str


ANSWER = {"relevant": True, "score": 7, "reason": "names the card's annual fee"}


def the_sdks_schema() -> dict:
    """The response format the SDK sends for Relevance (its own helper, not a copy of it)."""
    from openai.lib._parsing._completions import type_to_response_format_param

    return dict(type_to_response_format_param(Relevance))


@pytest.mark.parametrize("model", ["openrouter/openai/gpt-5.2", "groq/llama-3.3-70b"])
def test_chat_parse_reaches_the_upstream_unchanged_and_parses(openai_client, upstream, speakers, model):
    upstream.script(Reply(json=completion(json.dumps(ANSWER))))
    parsed = openai_client.beta.chat.completions.parse(
        model=model, messages=[{"role": "user", "content": "Is this document relevant?"}], response_format=Relevance
    )
    assert parsed.choices[0].message.parsed == Relevance(**ANSWER)
    sent = upstream.requests[0].body
    assert sent["response_format"] == the_sdks_schema()
    assert sent["response_format"]["json_schema"]["strict"] is True
    assert sent["response_format"]["json_schema"]["schema"]["required"] == ["relevant", "score", "reason"]


def test_responses_parse_natively_passes_text_format_unchanged(openai_client, upstream, speakers):
    upstream.script(Reply(json=response_object(json.dumps(ANSWER))))
    parsed = openai_client.responses.parse(model="openrouter/openai/gpt-5.2", input="Is this relevant?", text_format=Relevance)
    assert parsed.output_parsed == Relevance(**ANSWER)
    sent = upstream.requests[0]
    assert sent.path == "/v1/responses"
    fmt = sent.body["text"]["format"]
    expected = the_sdks_schema()["json_schema"]
    assert fmt == {"type": "json_schema", **expected}


def test_responses_parse_translated_for_a_chat_only_provider_keeps_the_schema(openai_client, upstream, speakers):
    upstream.script(Reply(json=completion(json.dumps(ANSWER))))
    parsed = openai_client.responses.parse(model="groq/llama-3.3-70b", input="Is this relevant?", text_format=Relevance)
    assert parsed.output_parsed == Relevance(**ANSWER)
    sent = upstream.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.body["response_format"] == the_sdks_schema()
