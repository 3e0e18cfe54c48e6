"""`secret:*` operator keys: the caller names itself with X-Marina-Agent, and
that name is what spend and traces record (passthru/auth.py)."""
from __future__ import annotations

import hashlib

import openai
import pytest

from ledger.models import SpendDaily, Trace
from passthru.models import RateBucket
from tests.conftest import MARINA_KEY

OPERATOR_KEY = "sk-marina-operator-key-777777777"
HELLO = [{"role": "user", "content": "hello"}]
MODEL = "openrouter/openai/gpt-5.2"


@pytest.fixture
def keys(marina_config):
    marina_config.MODEL_API_KEYS = f"{MARINA_KEY}:alice,{OPERATOR_KEY}:*"
    return marina_config


def client(marina_url: str, key: str, agent: str | None = None) -> openai.OpenAI:
    headers = {"X-Marina-Agent": agent} if agent is not None else {}
    return openai.OpenAI(base_url=f"{marina_url}/v1", api_key=key, max_retries=0, default_headers=headers)


def test_operator_key_records_the_named_caller(marina_url, keys, upstream):
    raw = client(marina_url, OPERATOR_KEY, "bob").chat.completions.with_raw_response.create(model=MODEL, messages=HELLO)
    assert raw.status_code == 200
    assert Trace.objects.get(request_id=raw.headers["x-request-id"]).key_name == "bob"
    assert SpendDaily.objects.get().key_name == "bob"
    assert OPERATOR_KEY not in str(list(Trace.objects.values()))


def test_operator_key_without_a_name_is_its_hash_name(marina_url, keys, upstream):
    client(marina_url, OPERATOR_KEY).chat.completions.create(model=MODEL, messages=HELLO)
    expected = f"key-{hashlib.sha256(OPERATOR_KEY.encode()).hexdigest()[:8]}"
    assert Trace.objects.get().key_name == expected


def test_a_bound_key_cannot_rename_its_caller(marina_url, keys, upstream):
    client(marina_url, MARINA_KEY, "mallory").chat.completions.create(model=MODEL, messages=HELLO)
    assert Trace.objects.get().key_name == "alice"


@pytest.mark.parametrize("agent", ["a:b", "has space", "x" * 65, "a/b"])
def test_a_malformed_name_is_400(marina_url, keys, upstream, agent):
    with pytest.raises(openai.BadRequestError) as caught:
        client(marina_url, OPERATOR_KEY, agent).chat.completions.create(model=MODEL, messages=HELLO)
    assert caught.value.body["code"] == "invalid_agent_name"
    assert upstream.requests == []


def test_rate_limit_buckets_follow_the_named_caller(marina_url, keys, upstream):
    keys.MARINA_RATE_LIMIT_RPS = 0.001
    keys.MARINA_RATE_LIMIT_BURST = 1
    client(marina_url, OPERATOR_KEY, "bob").chat.completions.create(model=MODEL, messages=HELLO)
    client(marina_url, OPERATOR_KEY, "carol").chat.completions.create(model=MODEL, messages=HELLO)
    with pytest.raises(openai.RateLimitError):
        client(marina_url, OPERATOR_KEY, "bob").chat.completions.create(model=MODEL, messages=HELLO)
    assert set(RateBucket.objects.values_list("client", flat=True)) == {"key:bob", "key:carol"}
