"""previous_response_id names a response of the caller's own key (issue 42 C2):
all keys reach the provider under one provider key, so Bob naming Alice's
response id would continue her conversation there. Now 404, in OpenAI's
envelope, before any provider is called."""
from __future__ import annotations

import copy

import openai
import pytest

from ledger.models import Trace
from tests.conftest import MARINA_KEY
from tests.in_process import InProcessMarina
from tests.passthru.doors.test_responses import native_events, response_object
from tests.upstream import Reply, Sse

BOB_KEY = "sk-marina-bob-key-1111111111111111"
OPS_KEY = "sk-marina-ops-key-2222222222222222"


@pytest.fixture
def keys(speakers):
    from passthru import auth

    speakers.MODEL_API_KEYS = f"{MARINA_KEY}:alice,{BOB_KEY}:bob,{OPS_KEY}:ops/*"
    auth.forget()
    return speakers


def client(marina: InProcessMarina, key: str, agent: str | None = None) -> openai.OpenAI:
    headers = {"x-marina-agent": agent} if agent else None
    return marina.openai(key, default_headers=headers)


def _streamed(response_id: str) -> Sse:
    events = copy.deepcopy(native_events())
    for event in events:
        if isinstance(event.get("response"), dict):
            event["response"]["id"] = response_id
    return Sse(chunks=events, usage=None, named=True, done=False)


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_another_keys_response_id_is_404_and_never_reaches_the_provider(marina, upstream, keys, streamed):
    alice, bob = client(marina, MARINA_KEY), client(marina, BOB_KEY)
    made = "resp_alice_streamed" if streamed else "resp_alice_plain"
    if streamed:
        upstream.script(_streamed(made))
        with alice.responses.stream(model="openai/gpt-5.2", input="my order #42") as events:
            assert events.get_final_response().id == made
    else:
        upstream.script(Reply(json={**response_object(), "id": made}))
        assert alice.responses.create(model="openai/gpt-5.2", input="my order #42").id == made
    assert Trace.objects.get(response_id=made).key_name == "alice"
    sent = len(upstream.requests)

    with pytest.raises(openai.NotFoundError) as refused:
        bob.responses.create(model="openai/gpt-5.2", input="and what else?", previous_response_id=made, stream=streamed)
    error = refused.value.body
    assert error["code"] == "response_not_found" and error["param"] == "previous_response_id"
    assert error["message"] == f"No response with id {made!r}." and error["type"] == "not_found_error"
    assert len(upstream.requests) == sent  # the provider never saw Bob's call
    assert Trace.objects.filter(key_name="bob", http_status=404).count() == 1

    upstream.script(Reply(json={**response_object(), "id": "resp_alice_2"}))
    alice.responses.create(model="openai/gpt-5.2", input="and what else?", previous_response_id=made)
    assert upstream.requests[-1].body["previous_response_id"] == made


def test_an_operator_keys_callers_share_its_responses_and_an_unknown_id_passes(marina, upstream, keys):
    upstream.script(Reply(json={**response_object(), "id": "resp_carol"}))
    client(marina, OPS_KEY, "carol").responses.create(model="openai/gpt-5.2", input="hi")
    upstream.script(Reply(json=response_object()))
    client(marina, OPS_KEY, "dave").responses.create(model="openai/gpt-5.2", input="on", previous_response_id="resp_carol")
    assert upstream.requests[-1].body["previous_response_id"] == "resp_carol"
    with pytest.raises(openai.NotFoundError):
        client(marina, MARINA_KEY).responses.create(model="openai/gpt-5.2", input="on", previous_response_id="resp_carol")
    # An id Marina never recorded: not another key's as far as it knows, passed on.
    upstream.script(Reply(json=response_object()))
    client(marina, BOB_KEY).responses.create(model="openai/gpt-5.2", input="on", previous_response_id="resp_elsewhere")
    assert upstream.requests[-1].body["previous_response_id"] == "resp_elsewhere"
