"""GET /v1/models names the doors that serve each id (read with the `openai` SDK)."""
from __future__ import annotations

import openai

from tests.conftest import MARINA_KEY


def test_each_card_names_its_doors(marina_url, speakers):
    speakers.MARINA_MODEL_ALIASES = {
        "fast": "openrouter/openai/gpt-5.2", "claude": "anthropic/claude-sonnet-4-5", "or-claude": "openrouter/anthropic/claude-sonnet-4.5",
    }
    client = openai.OpenAI(base_url=f"{marina_url}/v1", api_key=MARINA_KEY, max_retries=0)
    doors = {m.id: m.endpoints for m in client.models.list()}
    assert doors["fast"] == ["/v1/chat/completions", "/v1/responses", "/v1/embeddings"]
    assert doors["claude"] == doors["or-claude"] == ["/v1/chat/completions", "/v1/responses", "/v1/embeddings", "/v1/messages"]
    assert doors["marina/verify:fast"] == ["/v1/chat/completions"]
