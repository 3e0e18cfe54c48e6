"""GET /v1/models names the doors that serve each id (read with the `openai`
SDK), and only those: every listed (id, door) pair is called and served."""
from __future__ import annotations

from datetime import timedelta

import httpx
import pytest

from ledger.models import SpendDaily
from ledger.spend.selectors import utc_today
from tests.conftest import MARINA_KEY, PROVIDER_KEY
from tests.in_process import InProcessMarina
from tests.scripted_providers import ScriptedProviders

CHAT, RESPONSES, EMBEDDINGS, MESSAGES = "/v1/chat/completions", "/v1/responses", "/v1/embeddings", "/v1/messages"
ALIASES = {
    "fast": "openrouter/openai/gpt-5.2",
    "claude": "anthropic/claude-sonnet-4-5",
    "or-claude": "openrouter/anthropic/claude-sonnet-4.5",
    "small": "openai/gpt-4o-mini",
    "embed": "openai/text-embedding-3-small",
    "llama": "groq/llama-3.1-8b-instant",
}
# Bare ids served lately (listed from the ledger), each tried on the providers in MARINA_PROVIDER_ORDER.
RECENT = {"gpt-4o-mini": "openai", "text-embedding-3-small": "openai", "claude-haiku-4-5": "anthropic", "llama-3.3-70b": "groq"}
# What each door's call is, and the upstream paths that may serve it (Responses translated to chat for some).
CALLS = {
    CHAT: ({"messages": [{"role": "user", "content": "hi"}]}, ("/v1/chat/completions",)),
    RESPONSES: ({"input": "hi"}, ("/v1/responses", "/v1/chat/completions")),
    EMBEDDINGS: ({"input": ["hi", "there"]}, ("/v1/embeddings",)),
    MESSAGES: ({"max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}, ("/v1/messages",)),
}


@pytest.fixture
def listed(marina, speakers) -> dict[str, list[str]]:
    speakers.MARINA_MODEL_ALIASES = ALIASES
    for model, provider in RECENT.items():
        SpendDaily.objects.create(
            day=utc_today() - timedelta(days=1), key_name="tester", requested_model=model, provider=provider,
            upstream_model=model, calls=2,
        )  # fmt: skip
    client = marina.openai(MARINA_KEY)
    return {m.id: m.endpoints for m in client.models.list()}


@pytest.fixture
def world(upstream, speakers) -> ScriptedProviders:
    keys = {conf["api_key"]: name for name, conf in speakers.MARINA_PROVIDERS.items() if conf["api_key"]}
    assert keys[PROVIDER_KEY] == "openrouter"
    providers = ScriptedProviders(keys)
    upstream.answer = providers.answer
    return providers


def call(marina: InProcessMarina, door: str, model: str) -> httpx.Response:
    body, _ = CALLS[door]
    return marina.http.post(door, json={"model": model, **body}, headers={"Authorization": f"Bearer {MARINA_KEY}"}, timeout=30)


def test_each_card_names_only_the_doors_that_route_it(listed):
    assert listed["fast"] == listed["small"] == listed["llama"] == [CHAT, RESPONSES]
    assert listed["claude"] == listed["or-claude"] == listed["claude-haiku-4-5"] == [CHAT, RESPONSES, MESSAGES]
    assert listed["embed"] == listed["text-embedding-3-small"] == [EMBEDDINGS]
    # A bare id is tried on Anthropic too, but only a Claude id is offered on its Messages API.
    assert listed["gpt-4o-mini"] == listed["llama-3.3-70b"] == [CHAT, RESPONSES]
    assert listed["marina/verify:fast"] == [CHAT]


def test_every_listed_door_serves_its_id(marina, listed, world):
    pairs = [(model, door) for model, doors in listed.items() for door in doors]
    assert len(pairs) > len(listed), "some ids have more than one door"
    for model, door in pairs:
        seen = len(world.seen)
        answer = call(marina, door, model)
        assert answer.status_code == 200, (model, door, answer.text)
        if model.startswith("marina/"):
            continue  # a formation: its steps' calls are chat completions
        provider, path, _ = world.seen[-1]
        assert path in CALLS[door][1], (model, door, path)
        assert answer.headers["x-marina-upstream-model"].startswith(f"{provider}/"), (model, door)
        assert len(world.seen) > seen


def test_the_doors_left_out_are_refused(marina, listed, world):
    """What /v1/models over-claimed: embeddings for Claude, chat for an embedding model."""
    refused = call(marina, EMBEDDINGS, "claude")
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "model"
    assert "embeddings API" in refused.json()["error"]["message"]
    assert not world.seen, "no provider without embeddings is sent one"
    assert call(marina, CHAT, "embed").status_code == 404  # OpenAI: not a chat model
    assert call(marina, MESSAGES, "small").status_code == 400  # OpenAI has no Messages API
