"""Formations on real gunicorn servers against the scripted upstream:

- one conversation whose turns go alternately to two servers sharing one
  PostgreSQL keeps one continuous obligations ledger (the state is in the
  database, keyed as τ² sends it: no session header);
- τ²'s LiteLLM client drives every formation id and a stack through a
  multi-worker server, many conversations at once, streamed and not."""
from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # offline: before litellm is imported

from passthru.formations.state import conversation
from tests.conftest import MARINA_KEY
from tests.passthru.formations.play import (
    CANCEL_OBLIGATION,
    OPENING,
    TOOLS,
    Play,
    calls,
    extracted,
    json_reply,
    open_state,
    tau2_litellm,
    text,
)
from tests.upstream import tool_call

pytestmark = pytest.mark.e2e

OB = "marina/obligations:openrouter/agent"
REFUND = {"request": 1, "what": "refund the gift card", "target": "", "tools": []}
CANCEL = ("cancel_pending_order", {"order_id": "#W1234567", "reason": "mistake"})


def turn(server_url: str, messages: list[dict[str, Any]]) -> httpx.Response:
    response = httpx.post(
        f"{server_url}/v1/chat/completions",
        headers={"authorization": f"Bearer {MARINA_KEY}"},
        json={"model": OB, "messages": messages, "tools": TOOLS},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return response


def test_one_conversation_alternating_between_two_servers_on_one_postgres_keeps_one_ledger(servers, upstream):
    ledger = servers.postgres()
    a, b = servers.start(ledger), servers.start(ledger)
    play = Play(upstream, extract=extracted(CANCEL_OBLIGATION, REFUND), main=text("Confirm?"), judge=json_reply({"o1": "waiting", "o2": "waiting"}))

    # Turn 1 on A: two obligations read from the user's request.
    first = turn(a.base_url, OPENING)
    assert first.headers["x-marina-obligations"] == "on;open=2;satisfied=0;declined=0;nudges=0;extract=ok;check=handled"

    # Turn 2 on B: B knows both (its reminder names them) though A extracted them.
    history = [*OPENING, {"role": "assistant", "content": "Confirm?"}, {"role": "user", "content": "yes"}]
    play.script(extract=extracted(), main=calls(CANCEL))
    second = turn(b.base_url, history)
    assert play.calls == ["extract", "main"]
    reminder = play.bodies["main"][0]["messages"][-1]["content"]
    assert "o1: cancel order #W1234567" in reminder and "o2: refund the gift card" in reminder
    assert second.headers["x-marina-obligations"] == "on;open=2;satisfied=0;declined=0;nudges=0;extract=ok;check=tool-call"

    # Turn 3 on A: the cancellation B's reply asked for succeeded: o1 is settled.
    history += [
        {"role": "assistant", "content": None, "tool_calls": [tool_call(*CANCEL, "k1")]},
        {"role": "tool", "tool_call_id": "k1", "content": '{"order_id": "#W1234567", "status": "cancelled"}'},
    ]
    play.script(main=calls(("transfer_to_human_agents", {"summary": "refund"})))
    third = turn(a.base_url, history)
    assert play.calls == ["main"], "no new user turn: no extraction"
    assert third.headers["x-marina-obligations"] == "on;open=1;satisfied=1;declined=0;nudges=0;check=tool-call"

    # Turn 4 on B: the transfer hands off what is left.
    history += [
        {"role": "assistant", "content": None, "tool_calls": [tool_call("transfer_to_human_agents", {"summary": "refund"}, "t1")]},
        {"role": "tool", "tool_call_id": "t1", "content": "Transfer successful"},
    ]
    play.script(main=text("You are being transferred."))
    fourth = turn(b.base_url, history)
    assert fourth.headers["x-marina-obligations"] == "on;open=0;satisfied=1;declined=1;nudges=0;check=none-open"

    # One ledger in the shared database: the newest row holds every turn's changes.
    raw, version = ledger.rows("SELECT state, version FROM formation_state ORDER BY updated_at DESC LIMIT 1")[0]
    state = open_state(raw, conversation("tester", "", history, TOOLS, model=OB))  # stored sealed
    items = state["obligations"]["items"]
    assert [(i["id"], i["status"], i["by"]) for i in items] == [
        ("o1", "satisfied", "tool:cancel_pending_order"),
        ("o2", "declined", "transfer:transfer_to_human_agents"),
    ]
    assert state["obligations"]["turns"] == 2  # user turns read: the opening and "yes"
    ids = [r.headers["x-request-id"] for r in (first, second, third, fourth)]
    assert ledger.one("SELECT COUNT(*) FROM ledger_trace WHERE request_id = ANY(%s) AND route = 'obligations'", (ids,)) == 4


# --- τ²'s LiteLLM client, each formation id, a multi-worker server ------------------------
VERIFY = "marina/verify:openrouter/agent+openrouter/checker"
# id -> the upstream roles one conversation's first turn calls, and the headers it answers with
IDS: dict[str, tuple[list[str], dict[str, str]]] = {
    VERIFY: (["main", "review"], {"x-marina-verify": "approved"}),
    OB: (["extract", "main"], {"x-marina-obligations": "on;open=1;satisfied=0;declined=0;nudges=0;extract=ok;check=tool-call"}),
    "marina/argcheck:openrouter/agent": (["main"], {"x-marina-argcheck": "on;writes=1;checked=1;flagged=0;judged=0;nudges=0;check=supported"}),
    f"marina/obligations:marina/argcheck:{VERIFY}": (
        ["extract", "main", "review"],
        {"x-marina-verify": "approved", "x-marina-argcheck": "on;writes=1;checked=1;flagged=0;judged=0;nudges=0;check=supported"},
    ),
}
CONVERSATIONS = 6  # per id, at once


def tau2_call(server_url: str, model: str, number: int, *, stream: bool) -> tuple[dict[str, Any], dict[str, str]]:
    """One agent turn as τ² makes it: LiteLLM, `openai/<id>`, api_base, extra_body.
    Each (model, number) is a conversation of its own: the state follows the
    conversation, whatever model id serves its turns."""
    messages = [OPENING[0], {"role": "user", "content": f"{OPENING[1]['content']} ({model} #{number})"}]
    response = tau2_litellm(server_url, model, messages, stream=stream)
    if stream:
        import litellm  # here: at the top it would cost seconds of the unit suite's collection too

        chunks = list(response)
        whole = litellm.stream_chunk_builder(chunks, messages=messages)
        headers = chunks[0]._hidden_params["additional_headers"]  # the response headers, on every chunk
    else:
        whole, headers = response, response._hidden_params["additional_headers"]
    message = whole.choices[0].message
    reply = {
        "content": message.content,
        "tool_calls": [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or ()],
    }
    return reply, {k.removeprefix("llm_provider-"): v for k, v in headers.items()}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_tau2s_litellm_drives_every_formation_id_through_a_multi_worker_server(servers, upstream, stream):
    server = servers.start(workers=3)
    play = Play(upstream)
    for model, (roles, expected_headers) in IDS.items():
        play.script(extract=extracted(CANCEL_OBLIGATION), main=calls(CANCEL), review=json_reply({"verdict": "approve"}))
        with ThreadPoolExecutor(CONVERSATIONS) as pool:
            replies = [f.result() for f in [pool.submit(tau2_call, server.base_url, model, n, stream=stream) for n in range(CONVERSATIONS)]]
        for reply, headers in replies:
            assert reply["tool_calls"] == [CANCEL], model
            for name, value in expected_headers.items():
                assert headers[name] == value, (model, name)
        assert sorted(play.calls) == sorted(roles * CONVERSATIONS), model
        assert all(b.get("reasoning_effort") == "high" for b in play.bodies["main"]), model
        assert not any(b.get("stream") for bodies in play.bodies.values() for b in bodies), model
    assert server.ledger is not None
    traces = server.ledger.rows("SELECT requested_model, status, stream FROM ledger_trace")
    assert len(traces) == CONVERSATIONS * len(IDS)
    assert {(m, s, bool(st)) for m, s, st in traces} == {(m, "ok", stream) for m in IDS}
