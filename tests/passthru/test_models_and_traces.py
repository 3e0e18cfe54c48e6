"""/v1/models, aliases, extra providers and what traces keep of bodies."""
from __future__ import annotations

import json

from ledger.models import SpendDaily, Trace
from tests.conftest import MARINA_KEY, PROVIDER_KEY
from tests.upstream import Reply, completion


def test_models_lists_aliases_and_recently_served_ids(openai_client, marina_config):
    marina_config.MARINA_MODEL_ALIASES = {"fast": "openrouter/openai/gpt-5.2"}
    openai_client.chat.completions.create(model="openrouter/qwen/qwen3", messages=[{"role": "user", "content": "x"}])
    ids = [m.id for m in openai_client.models.list()]
    assert "fast" in ids and "openrouter/qwen/qwen3" in ids


def test_models_requires_a_key(marina):
    reply = marina.http.get("/v1/models")
    assert reply.status_code == 401 and reply.json()["error"]["code"] == "invalid_api_key"


def test_alias_routes_to_its_target_and_the_ledger_keeps_the_requested_id(openai_client, upstream, marina_config):
    marina_config.MARINA_MODEL_ALIASES = {"fast": "openrouter/openai/gpt-5.2"}
    raw = openai_client.chat.completions.with_raw_response.create(model="fast", messages=[{"role": "user", "content": "x"}])
    assert raw.headers["x-marina-upstream-model"] == "openrouter/openai/gpt-5.2"
    assert upstream.requests[0].body["model"] == "openai/gpt-5.2"
    row = SpendDaily.objects.get()
    assert (row.requested_model, row.provider, row.upstream_model) == ("fast", "openrouter", "openai/gpt-5.2")


def test_extra_provider_without_a_key_is_served_and_sends_no_authorization(openai_client, upstream, marina_config):
    providers = dict(marina_config.MARINA_PROVIDERS)
    providers["local"] = {"base_url": upstream.base_url, "api_key": "", "key_env": "LOCAL_API_KEY", "keyless_ok": "yes"}
    marina_config.MARINA_PROVIDERS = providers
    reply = openai_client.chat.completions.create(model="local/llama-3-8b", messages=[{"role": "user", "content": "x"}])
    assert reply.choices[0].message.content
    assert upstream.requests[0].body["model"] == "llama-3-8b"
    assert "authorization" not in upstream.requests[0].headers


def test_unknown_model_price_is_unpriced_not_zero(openai_client, upstream):
    upstream.script(Reply(json=completion("x", model="no-such-model")))
    raw = openai_client.chat.completions.with_raw_response.create(
        model="openrouter/acme/no-such-model", messages=[{"role": "user", "content": "x"}]
    )
    assert "x-marina-cost-usd" not in raw.headers
    span = Trace.objects.get().spans.get()
    assert (span.cost_nanousd, span.cost_source) == (None, "none")
    row = SpendDaily.objects.get()
    assert (row.unpriced_calls, row.cost_nanousd) == (1, 0)


def test_price_table_covers_cached_tokens(openai_client, upstream, marina_config):
    providers = dict(marina_config.MARINA_PROVIDERS)
    providers["openai"] = {**providers["openai"], "api_key": "sk-openai-test-key-000"}
    marina_config.MARINA_PROVIDERS = providers
    upstream.script(Reply(json=completion("x", prompt_tokens=1_000_000, cached_tokens=1_000_000, completion_tokens=0)))
    raw = openai_client.chat.completions.with_raw_response.create(
        model="openai/gpt-4o", messages=[{"role": "user", "content": "x"}]
    )
    # gpt-4o: $1.25 per million cached input tokens (genai-prices), none uncached.
    assert raw.headers["x-marina-cost-usd"] == "1.25000000"
    assert Trace.objects.get().spans.get().cost_source == "price_table"


def test_bodies_are_not_stored_by_default(openai_client):
    openai_client.chat.completions.create(model="openrouter/a/b", messages=[{"role": "user", "content": "secret plan"}])
    trace = Trace.objects.get()
    assert trace.body is None and trace.spans.get().body is None


def test_bodies_are_stored_redacted_when_asked(openai_client, marina_config):
    marina_config.MARINA_TRACE_BODIES = True
    openai_client.chat.completions.create(
        model="openrouter/a/b",
        messages=[{"role": "user", "content": f"my key is {PROVIDER_KEY} and {MARINA_KEY}, header bearer tok3n.ABCDEFGH"}],
        extra_body={"api_key": "sk-should-never-be-kept-123"},
    )
    trace = Trace.objects.get()
    stored = json.dumps([trace.body, trace.spans.get().body])
    assert "my key is" in stored
    for secret in (PROVIDER_KEY, MARINA_KEY, "sk-should-never-be-kept-123", "tok3n.ABCDEFGH"):
        assert secret not in stored
    assert trace.spans.get().body["response"]["choices"][0]["message"]["content"]


def test_a_trace_carries_its_conversation_identity_and_no_content(openai_client, upstream):
    """τ²'s seed and hashes of the opening and the system texts (kernel/conversation.py),
    forwarded unchanged upstream; the same opening gives the same hash on every call."""
    from kernel.conversation import digest, identify

    opening = [
        {"role": "system", "content": "policy"},
        {"role": "assistant", "content": "Hi! How can I help you today?"},
        {"role": "user", "content": "I want to cancel reservation EHGLP3."},
    ]
    openai_client.chat.completions.create(model="openrouter/openai/gpt-5.2", messages=opening, seed=626729)
    openai_client.chat.completions.create(
        model="openrouter/openai/gpt-5.2", seed=626729,
        messages=[*opening, {"role": "assistant", "content": "Sure."}, {"role": "user", "content": "Thanks"}],
    )  # fmt: skip
    openai_client.chat.completions.create(model="openrouter/openai/gpt-5.2", messages=[{"role": "user", "content": "x"}])
    assert upstream.requests[0].body["seed"] == 626729
    rows = list(Trace.objects.order_by("started_at").values_list("conv_seed", "conv_opening", "conv_system"))
    want = identify({"seed": 626729, "messages": opening})
    assert rows[0] == rows[1] == (626729, want.opening, digest(["policy"]))
    assert rows[2][0] is None and rows[2][1] not in ("", want.opening) and rows[2][2] == ""
    assert len(want.opening) == 16 and "EHGLP3" not in json.dumps(rows)
