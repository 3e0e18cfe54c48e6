"""Routing without a provider prefix, through Marina in-process and the scripted
upstream (LiteLLM's case over a socket): the fallback loop, vendor prefixes without their key, `default`,
the passthru pin. Each provider is the scripted upstream under its own path
(`/anthropic/v1`, ...), so the requests show which provider was asked."""
from __future__ import annotations

import os

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # before litellm is imported: stay offline

import openai
import pytest

from ledger.models import Trace
from passthru.fallback import FAILED, NOT_HERE, SERVED, outcome
from tests.conftest import MARINA_KEY
from tests.upstream import Reply, Reset, Sse, completion

HELLO = [{"role": "user", "content": "hello"}]
ANTHROPIC_404 = {"type": "error", "error": {"type": "not_found_error", "message": "model: gpt-4.1-mini"}}
OPENAI_404 = {"error": {"message": "The model `x` does not exist", "type": "invalid_request_error", "code": "model_not_found"}}


@pytest.fixture
def routed(marina_config, upstream):
    """anthropic, openai and openrouter keyed, tried in that order; together keyless."""
    root = upstream.base_url.removesuffix("/v1")
    providers = {name: dict(conf) for name, conf in marina_config.MARINA_PROVIDERS.items()}
    for name in ("anthropic", "openai", "openrouter"):
        providers[name] = {"base_url": f"{root}/{name}/v1", "api_key": f"sk-{name}-key", "key_env": f"{name.upper()}_API_KEY"}
    providers["together"] = {"base_url": f"{root}/together/v1", "api_key": "", "key_env": "TOGETHER_API_KEY"}
    marina_config.MARINA_PROVIDERS = providers
    marina_config.MARINA_PROVIDER_ORDER = ["anthropic", "openai", "together", "openrouter"]
    return marina_config


def asked(upstream) -> list[tuple[str, str]]:
    """(provider, model sent) of every upstream request, in order."""
    return [(r.path.split("/")[1], r.body["model"]) for r in upstream.requests]


def spans_of(request_id: str) -> list[tuple[str, str, str]]:
    trace = Trace.objects.get(request_id=request_id)
    return [(s.provider, s.status, s.error_kind) for s in trace.spans.order_by("seq")]


def test_unprefixed_id_falls_through_an_anthropic_404_to_the_next_provider(routed, openai_client, upstream):
    upstream.script(Reply(status=404, json=ANTHROPIC_404), Reply(json=completion("from openai")))
    raw = openai_client.chat.completions.with_raw_response.create(model="gpt-4.1-mini", messages=HELLO)
    assert raw.parse().choices[0].message.content == "from openai"
    assert raw.headers["x-marina-upstream-model"] == "openai/gpt-4.1-mini"
    assert asked(upstream) == [("anthropic", "gpt-4.1-mini"), ("openai", "gpt-4.1-mini")]
    # Each attempt is a span; the trace is ok.
    assert spans_of(raw.headers["x-request-id"]) == [("anthropic", "error", "http_404"), ("openai", "ok", "")]
    assert Trace.objects.get().status == "ok"
    # Every attempt carries the request's id.
    assert {r.headers["x-request-id"] for r in upstream.requests} == {raw.headers["x-request-id"]}


def test_failures_are_passed_over_too(routed, openai_client, upstream):
    upstream.script(Reset(), Reply(status=503, json={"error": {"message": "overloaded"}}), Reply(json=completion("or")))
    raw = openai_client.chat.completions.with_raw_response.create(model="meta-llama/llama-3.1-8b", messages=HELLO)
    assert raw.headers["x-marina-upstream-model"] == "openrouter/meta-llama/llama-3.1-8b"
    assert [m for _, m in asked(upstream)] == ["meta-llama/llama-3.1-8b"] * 3  # a foreign prefix is sent as it is
    assert spans_of(raw.headers["x-request-id"]) == [
        ("anthropic", "error", "reset"),
        ("openai", "error", "http_503"),
        ("openrouter", "ok", ""),
    ]


def test_nobody_knows_the_model_is_404_model_not_found(routed, openai_client, upstream):
    upstream.script(
        Reply(status=404, json=ANTHROPIC_404),
        Reply(status=404, json=OPENAI_404),
        Reply(status=400, json={"error": {"message": "gpt-9 is not a valid model ID", "code": 400}}),
    )
    with pytest.raises(openai.NotFoundError) as caught:
        openai_client.chat.completions.create(model="gpt-9", messages=HELLO)
    error = caught.value.body
    assert (error["code"], error["param"]) == ("model_not_found", "model")
    assert "anthropic" in error["message"] and "openrouter" in error["message"]
    assert len(upstream.requests) == 3
    trace = Trace.objects.get()
    assert (trace.http_status, trace.error_kind) == (404, "model_not_found")
    assert trace.spans.count() == 3


def test_all_failed_is_502_naming_each_attempt(routed, openai_client, upstream):
    upstream.script(Reply(status=404, json=ANTHROPIC_404), Reply(status=500, json={}), Reply(status=429, json={}))
    with pytest.raises(openai.APIStatusError) as caught:
        openai_client.chat.completions.create(model="gpt-4.1-mini", messages=HELLO)
    assert caught.value.status_code == 502
    message = caught.value.body["message"]
    assert "anthropic: not found" in message and "openai: HTTP 500" in message and "openrouter: HTTP 429" in message
    assert Trace.objects.get().error_kind == "no_provider"


def test_a_request_error_is_final_not_retried_elsewhere(routed, openai_client, upstream):
    bad = {"error": {"message": "messages[0].content is required", "type": "invalid_request_error", "code": None}}
    upstream.script(Reply(status=400, json=bad))
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client.chat.completions.create(model="gpt-4.1-mini", messages=HELLO)
    assert caught.value.body["message"] == bad["error"]["message"]  # the provider's own body
    assert len(upstream.requests) == 1


def test_explicit_provider_has_no_fallback(routed, openai_client, upstream):
    upstream.script(Reply(status=404, json=ANTHROPIC_404))
    with pytest.raises(openai.NotFoundError) as caught:
        openai_client.chat.completions.create(model="anthropic/claude-nope", messages=HELLO)
    assert caught.value.body["type"] == "not_found_error"  # Anthropic's body, relayed
    assert asked(upstream) == [("anthropic", "claude-nope")]


def test_vendor_prefix_without_its_key_goes_to_the_aggregators_with_the_full_id(routed, openai_client, upstream):
    providers = dict(routed.MARINA_PROVIDERS)
    providers["openai"] = {**providers["openai"], "api_key": ""}
    routed.MARINA_PROVIDERS = providers
    raw = openai_client.chat.completions.with_raw_response.create(model="openai/gpt-4.1", messages=HELLO)
    # together has no key: only openrouter is tried.
    assert asked(upstream) == [("openrouter", "openai/gpt-4.1")]
    assert raw.headers["x-marina-upstream-model"] == "openrouter/openai/gpt-4.1"


def test_vendor_prefix_without_any_aggregator_is_503_naming_both(routed, openai_client, upstream):
    providers = dict(routed.MARINA_PROVIDERS)
    providers["openai"] = {**providers["openai"], "api_key": ""}
    providers["openrouter"] = {**providers["openrouter"], "api_key": ""}
    routed.MARINA_PROVIDERS = providers
    with pytest.raises(openai.APIStatusError) as caught:
        openai_client.chat.completions.create(model="openai/gpt-4.1", messages=HELLO)
    assert caught.value.status_code == 503
    assert "OPENAI_API_KEY" in caught.value.body["message"] and "openrouter" in caught.value.body["message"]
    assert upstream.requests == []


def test_aggregator_without_its_key_is_503(routed, openai_client, upstream):
    with pytest.raises(openai.APIStatusError) as caught:
        openai_client.chat.completions.create(model="together/meta-llama/x", messages=HELLO)
    assert caught.value.status_code == 503 and "TOGETHER_API_KEY" in caught.value.body["message"]
    assert upstream.requests == []


@pytest.mark.parametrize("model", ["default", "marina/default"])
def test_default_is_the_operators_default_model(routed, openai_client, upstream, model):
    routed.MARINA_DEFAULT_MODEL = "openrouter/openai/gpt-5.2"
    raw = openai_client.chat.completions.with_raw_response.create(model=model, messages=HELLO)
    assert asked(upstream) == [("openrouter", "openai/gpt-5.2")]
    assert raw.headers["x-marina-upstream-model"] == "openrouter/openai/gpt-5.2"


def test_default_failure_is_returned_not_another_provider(routed, openai_client, upstream):
    routed.MARINA_DEFAULT_MODEL = "anthropic/claude-x"
    upstream.script(Reply(status=500, json={"error": {"message": "down"}}))
    with pytest.raises(openai.InternalServerError):
        openai_client.chat.completions.create(model="default", messages=HELLO)
    assert asked(upstream) == [("anthropic", "claude-x")]


def test_default_without_a_configured_default_is_404_naming_the_variable(routed, openai_client, upstream):
    routed.MARINA_DEFAULT_MODEL = ""
    with pytest.raises(openai.NotFoundError) as caught:
        openai_client.chat.completions.create(model="marina/default", messages=HELLO)
    assert "MARINA_DEFAULT_MODEL" in caught.value.body["message"]
    assert upstream.requests == []


def test_the_pin_overrides_the_requested_id(routed, openai_client, upstream):
    routed.MARINA_PASSTHRU_MODEL = "openrouter/qwen/qwen3-8b"
    raw = openai_client.chat.completions.with_raw_response.create(model="anthropic/claude-x", messages=HELLO)
    assert asked(upstream) == [("openrouter", "qwen/qwen3-8b")]
    assert raw.headers["x-marina-upstream-model"] == "openrouter/qwen/qwen3-8b"
    assert Trace.objects.get().requested_model == "anthropic/claude-x"


def test_formations_may_use_only_the_pin(routed, openai_client, upstream):
    routed.MARINA_PASSTHRU_MODEL = "openrouter/qwen/qwen3-8b"
    with pytest.raises(openai.PermissionDeniedError) as caught:
        openai_client.chat.completions.create(model="marina/verify:openrouter/other", messages=HELLO)
    assert (caught.value.body["code"], caught.value.body["param"]) == ("model_not_allowed", "model")
    assert upstream.requests == []
    # `default` and the pinned id itself are allowed.
    upstream.script(
        Reply(json=completion("draft")), Reply(json=completion('{"verdict": "approve"}')),
        Reply(json=completion("draft")), Reply(json=completion('{"verdict": "approve"}')),
    )
    for model in ("marina/verify:default", "marina/verify:openrouter/qwen/qwen3-8b"):
        raw = openai_client.chat.completions.with_raw_response.create(model=model, messages=HELLO)
        assert raw.status_code == 200
    assert {m for _, m in asked(upstream)} == {"qwen/qwen3-8b"}


def test_litellm_as_tau2_names_an_unprefixed_model(routed, marina_url, upstream):
    """τ²'s `--agent-llm openai/gpt-4.1-mini` with api_base at Marina sends `gpt-4.1-mini`."""
    import litellm  # here, not at the top: importing litellm costs seconds of every worker's collection

    upstream.script(Reply(status=404, json=ANTHROPIC_404), Reply(json=completion("served")))
    litellm.drop_params = True
    response = litellm.completion(
        model="openai/gpt-4.1-mini", messages=HELLO, api_base=f"{marina_url}/v1", api_key=MARINA_KEY, num_retries=0
    )
    assert response.choices[0].message.content == "served"
    headers = response._hidden_params["additional_headers"]
    assert headers["llm_provider-x-marina-upstream-model"] == "openai/gpt-4.1-mini"


def test_stream_falls_through_to_the_provider_that_serves(routed, openai_client, upstream):
    upstream.script(Reply(status=404, json=ANTHROPIC_404), Sse())
    with openai_client.chat.completions.with_streaming_response.create(model="gpt-4.1-mini", messages=HELLO, stream=True) as raw:
        assert raw.headers["x-marina-upstream-model"] == "openai/gpt-4.1-mini"
        text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    assert text == "Hello there, streamed."
    assert spans_of(raw.headers["x-request-id"]) == [("anthropic", "error", "http_404"), ("openai", "ok", "")]


def test_outcome_classifies_replies():
    assert outcome(200, b"{}") == SERVED
    assert outcome(404, b"") == NOT_HERE
    assert outcome(400, b'{"error":{"message":"Invalid model: foo"}}') == NOT_HERE
    assert outcome(400, b'{"error":{"code":"model_not_found"}}') == NOT_HERE
    assert outcome(400, b'{"error":{"message":"temperature must be <= 2"}}') == SERVED
    assert outcome(401, b"") == FAILED and outcome(429, b"") == FAILED and outcome(503, b"") == FAILED


def test_stream_nobody_serves_is_404(routed, openai_client, upstream):
    upstream.script(Reply(status=404, json=ANTHROPIC_404), Reply(status=404, json=OPENAI_404), Reply(status=404, json={}))
    with pytest.raises(openai.NotFoundError) as caught:
        openai_client.chat.completions.create(model="gpt-9", messages=HELLO, stream=True)
    assert caught.value.body["code"] == "model_not_found"
    assert Trace.objects.get().spans.count() == 3
