"""`stream: true` through formations and stacks: the formation runs whole on
the unstreamed body, then its answer goes out as chat.completion.chunk
events. Read by the openai SDK, by LiteLLM as τ² calls it, and raw."""
from __future__ import annotations

import json
import os
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before litellm is imported

import openai
import pytest

from ledger.models import Trace
from passthru.models import Crew
from tests.conftest import MARINA_KEY
from tests.passthru.formations.play import (
    CANCEL_OBLIGATION,
    OPENING,
    TOOLS,
    Play,
    calls,
    extracted,
    json_reply,
    tau2_litellm,
    text,
)
from tests.upstream import Reply

VERIFY = "marina/verify:openrouter/agent+openrouter/checker"
STACK = "marina/obligations:marina/argcheck:openrouter/agent"
CANCEL_STATED = ("cancel_pending_order", {"order_id": "#W1234567", "reason": "ordered by mistake"})
APPROVE = json_reply({"verdict": "approve"})


def streamed(openai_client: openai.OpenAI, model: str, **extra: Any) -> tuple[Any, list[Any]]:
    headers = {"x-marina-session": "stream-1"}
    raw = openai_client.chat.completions.with_raw_response.create(
        model=model, messages=OPENING, tools=TOOLS, stream=True, extra_headers=headers, **extra
    )
    return raw, list(raw.parse())


def tool_calls_of(chunks: list[Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """The tool calls the chunks add up to, as a client accumulates them."""
    found: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or ():
                slot = found.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                slot["id"] += call.id or ""
                slot["name"] += call.function.name or ""
                slot["arguments"] += call.function.arguments or ""
    return [(c["id"], c["name"], json.loads(c["arguments"])) for _, c in sorted(found.items())]


def test_verify_streams_its_approved_tool_call(openai_client, upstream):
    play = Play(upstream, main=calls(CANCEL_STATED), review=APPROVE)
    raw, chunks = streamed(openai_client, VERIFY)
    assert play.calls == ["main", "review"]
    assert "stream" not in play.bodies["main"][0], "the steps run unstreamed"
    assert raw.headers["content-type"].startswith("text/event-stream")
    assert raw.headers["x-marina-verify"] == "approved"
    assert tool_calls_of(chunks) == [("c0", "cancel_pending_order", CANCEL_STATED[1])]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert all(c.model == VERIFY for c in chunks) and all(c.usage is None for c in chunks)
    trace = Trace.objects.get(request_id=raw.headers["x-request-id"])
    assert (trace.stream, trace.route, trace.formation_label, trace.status) == (True, "verify", "approved", "ok")
    assert raw.headers["x-marina-cost-usd"] == "0.00110000"  # draft 0.001 + review 0.0001


def test_a_stack_streams_text_and_the_summed_usage_when_asked(openai_client, upstream):
    play = Play(upstream, extract=extracted(CANCEL_OBLIGATION), main=text("Shall I cancel it?"), judge=json_reply({"o1": "waiting"}))
    raw, chunks = streamed(openai_client, STACK, stream_options={"include_usage": True})
    assert play.calls == ["extract", "main", "judge"]
    assert all("stream_options" not in b for bodies in play.bodies.values() for b in bodies)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Shall I cancel it?"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and (usage.prompt_tokens, usage.completion_tokens) == (200, 20)  # 50+100+50, 5+10+5
    assert raw.headers["x-marina-obligations"] == "on;open=1;satisfied=0;declined=0;nudges=0;extract=ok;check=handled"
    assert raw.headers["x-marina-argcheck"].startswith("on;writes=0")
    trace = Trace.objects.get(request_id=raw.headers["x-request-id"])
    assert trace.stream and trace.route == "obligations+argcheck"


def test_the_raw_events_end_with_done(marina, upstream):
    Play(upstream, main=text("Checked."), review=APPROVE)
    response = marina.http.post(
        "/v1/chat/completions",
        headers={"authorization": f"Bearer {MARINA_KEY}"},
        json={"model": VERIFY, "messages": OPENING, "stream": True},
        timeout=30,
    )
    assert response.status_code == 200
    events = [e for e in response.text.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert [c["object"] for c in chunks] == ["chat.completion.chunk"] * 2
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "Checked."}
    assert chunks[1]["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "stop"}


def test_an_agent_error_reaches_a_streaming_client_as_the_error(openai_client, upstream):
    Play(upstream, extract=extracted(CANCEL_OBLIGATION), main=Reply(status=429, json={"error": {"message": "slow down"}}))
    with pytest.raises(openai.RateLimitError):
        streamed(openai_client, STACK)
    trace = Trace.objects.get()
    assert (trace.stream, trace.http_status) == (True, 429)


def test_a_crew_over_a_formation_streams(openai_client, upstream):
    Crew.objects.create(name="checked", model_id=VERIFY)
    Play(upstream, main=text("Done."), review=APPROVE)
    raw, chunks = streamed(openai_client, "marina:checked")
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Done."
    assert all(c.model == "marina:checked" for c in chunks)


@pytest.mark.parametrize("model", [VERIFY, STACK, f"marina/argcheck:{VERIFY}"])
def test_litellm_streams_through_formations(marina_url, upstream, model):
    play = Play(upstream, extract=extracted(), main=calls(CANCEL_STATED), review=APPROVE)
    import litellm  # here, not at the top: importing litellm costs seconds of every worker's collection

    chunks = list(tau2_litellm(marina_url, model, OPENING, stream=True))
    whole = litellm.stream_chunk_builder(chunks, messages=OPENING)
    call = whole.choices[0].message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == CANCEL_STATED
    assert whole.choices[0].finish_reason == "tool_calls"
    assert all(b["reasoning_effort"] == "high" for b in play.bodies["main"])
    assert Trace.objects.get().stream is True
