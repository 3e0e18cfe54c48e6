"""`secret:*` / `secret:ops/*` operator keys: the caller names itself with
X-Marina-Agent, under the operator key's name (`ops/alice`), and that name is
what spend, traces, rate limits and formation state go by (passthru/auth.py)."""
from __future__ import annotations

import hashlib
import json

import openai
import pytest

from ledger.models import SpendDaily, Trace
from passthru.models import RateBucket
from tests.conftest import MARINA_KEY
from tests.in_process import InProcessMarina

OPERATOR_KEY = "sk-marina-operator-key-777777777"
OPS_KEY = "sk-marina-ops-key-888888888888888"  # `secret:ops/*`
OPERATOR_NAME = f"key-{hashlib.sha256(OPERATOR_KEY.encode()).hexdigest()[:8]}"
HELLO = [{"role": "user", "content": "hello"}]
MODEL = "openrouter/openai/gpt-5.2"


@pytest.fixture
def keys(marina_config):
    marina_config.MODEL_API_KEYS = f"{MARINA_KEY}:alice,{OPERATOR_KEY}:*,{OPS_KEY}:ops/*"
    return marina_config


def client(marina: InProcessMarina, key: str, agent: str | None = None) -> openai.OpenAI:
    headers = {"X-Marina-Agent": agent} if agent is not None else {}
    return marina.openai(key, default_headers=headers)


def test_operator_key_records_the_named_caller(marina, keys, upstream):
    raw = client(marina, OPERATOR_KEY, "bob").chat.completions.with_raw_response.create(model=MODEL, messages=HELLO)
    assert raw.status_code == 200
    assert Trace.objects.get(request_id=raw.headers["x-request-id"]).key_name == f"{OPERATOR_NAME}/bob"
    assert SpendDaily.objects.get().key_name == f"{OPERATOR_NAME}/bob"
    assert OPERATOR_KEY not in str(list(Trace.objects.values()))


def test_operator_key_without_a_name_is_its_hash_name(marina, keys, upstream):
    client(marina, OPERATOR_KEY).chat.completions.create(model=MODEL, messages=HELLO)
    assert Trace.objects.get().key_name == OPERATOR_NAME


def test_a_bound_key_cannot_rename_its_caller(marina, keys, upstream):
    client(marina, MARINA_KEY, "mallory").chat.completions.create(model=MODEL, messages=HELLO)
    assert Trace.objects.get().key_name == "alice"


@pytest.mark.parametrize("agent", ["a:b", "has space", "x" * 65, "x" * 52, "a/b", "../alice"])
def test_a_malformed_name_is_400(marina, keys, upstream, agent):
    with pytest.raises(openai.BadRequestError) as caught:
        client(marina, OPERATOR_KEY, agent).chat.completions.create(model=MODEL, messages=HELLO)
    assert caught.value.body["code"] == "invalid_agent_name"
    assert upstream.requests == []


def test_rate_limit_buckets_follow_the_named_caller(marina, keys, upstream):
    keys.MARINA_RATE_LIMIT_RPS = 0.001
    keys.MARINA_RATE_LIMIT_BURST = 1
    client(marina, OPERATOR_KEY, "bob").chat.completions.create(model=MODEL, messages=HELLO)
    client(marina, OPERATOR_KEY, "carol").chat.completions.create(model=MODEL, messages=HELLO)
    with pytest.raises(openai.RateLimitError):
        client(marina, OPERATOR_KEY, "bob").chat.completions.create(model=MODEL, messages=HELLO)
    assert set(RateBucket.objects.values_list("client", flat=True)) == {
        f"key:{OPERATOR_NAME}/bob",
        f"key:{OPERATOR_NAME}/carol",
    }


# --- An operator key's callers never take another key's name --------------------------
def test_naming_another_keys_name_is_charged_under_the_operator(marina, keys, upstream):
    raw = client(marina, OPS_KEY, "alice").chat.completions.with_raw_response.create(model=MODEL, messages=HELLO)
    assert Trace.objects.get(request_id=raw.headers["x-request-id"]).key_name == "ops/alice"
    client(marina, MARINA_KEY).chat.completions.create(model=MODEL, messages=HELLO)
    assert dict(SpendDaily.objects.values_list("key_name", "calls")) == {"ops/alice": 1, "alice": 1}


def test_an_operator_caller_named_like_a_key_does_not_drain_its_bucket(marina, keys, upstream):
    keys.MARINA_RATE_LIMIT_RPS = 0.001
    keys.MARINA_RATE_LIMIT_BURST = 1
    client(marina, OPS_KEY, "alice").chat.completions.create(model=MODEL, messages=HELLO)
    # alice's own key still has her whole bucket
    assert client(marina, MARINA_KEY).chat.completions.with_raw_response.create(model=MODEL, messages=HELLO).status_code == 200
    assert set(RateBucket.objects.values_list("client", flat=True)) == {"key:ops/alice", "key:alice"}


def test_formation_state_follows_the_real_principal(marina, keys, upstream):
    """alice's obligations under session s2 are never the operator's `alice`'s."""
    from passthru.formations.obligations.prompts import EXTRACT_MARKER as extract_marker
    from passthru.models import ConversationState
    from tests.passthru.formations.play import CANCEL_OBLIGATION, OPENING, TOOLS, Play, extracted, json_reply, text

    def ask(key: str, agent: str | None) -> None:
        Play(upstream, extract=extracted(CANCEL_OBLIGATION), main=text("Shall I?"), judge=json_reply({"o1": "waiting"}))
        client(marina, key, agent).chat.completions.create(
            model="marina/obligations:openrouter/agent", messages=OPENING, tools=TOOLS, extra_headers={"x-marina-session": "s2"}
        )

    ask(MARINA_KEY, None)
    ask(OPS_KEY, "alice")
    assert sorted(k.partition("|")[0] for k in ConversationState.objects.values_list("key", flat=True)) == ["alice", "ops/alice"]
    # the operator's caller started a ledger of its own: its extraction saw none of alice's open items
    extractions = [r for r in upstream.requests if extract_marker in r.body["messages"][0]["content"]]
    assert len(extractions) == 2
    assert "o1" not in json.dumps(extractions[1].body["messages"][1:])


def test_a_key_name_with_a_slash_stops_start_up():
    import os
    import subprocess
    import sys

    # marina.settings, as the server starts: the tests' own settings (tests/settings.py) drop MODEL_API_KEYS
    env = {**os.environ, "MODEL_API_KEYS": "sk-marina-x:ops/alice", "MARINA_ENV_FILE": os.devnull,
           "DJANGO_SETTINGS_MODULE": "marina.settings"}
    done = subprocess.run([sys.executable, "manage.py", "check"], env=env, capture_output=True, text=True)
    assert done.returncode != 0
    assert "may not contain '/'" in done.stderr and "sk-marina-x" not in done.stderr
