"""marina/verify: end to end: the real openai SDK -> Marina in-process
(LiteLLM, as τ² calls it: over a socket) -> the scripted upstream playing proposer and checker."""
from __future__ import annotations

import json
import os

# LiteLLM must stay offline: its price map ships inside the package. Set before
# anything imports litellm.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
from typing import Any

import openai
import pytest

from kernel.conversation import digest
from ledger.models import SpendDaily, Trace
from passthru.formations.framing import unframe
from passthru.formations.verify.formation import split_id
from passthru.formations.verify.prompts import CHECKER_MARKER, REVISION_MARKER
from tests.conftest import MARINA_KEY
from tests.passthru.formations.play import TOOLS as PLAY_TOOLS
from tests.upstream import Reply, Reset, ScriptedUpstream, completion, tool_call

MODEL = "marina/verify:openrouter/prop+openrouter/check"

TOOLS = PLAY_TOOLS[:2]  # the order lookup and the cancellation (no transfer)
POLICY = "Before cancelling an order you must obtain explicit user confirmation (yes) to proceed."
MESSAGES = [
    {"role": "system", "content": POLICY},
    {"role": "user", "content": "Please cancel order #W1234567, I ordered it by mistake."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [tool_call("get_order_details", {"order_id": "#W1234567"}, "c1")],
    },
    {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"order_id": "#W1234567", "status": "pending"})},
]
CANCEL = {"order_id": "#W1234567", "reason": "ordered by mistake"}
CONFIRM_TEXT = "Order #W1234567 is pending. Shall I cancel it (yes/no)?"


def approve() -> Reply:
    return Reply(json=completion('```json\n{"verdict": "approve"}\n```', prompt_tokens=300, completion_tokens=7, cost=0.0003))


def revise(call: str | None = "cancel_pending_order", quote: str = "obtain explicit user confirmation (yes)", argument: str | None = None) -> Reply:
    verdict = {
        "verdict": "revise",
        "fix": "Ask the user to confirm before cancelling.",
        "conflict": {"quote": quote, "call": call, "argument": argument},
    }
    return Reply(json=completion("Verdict:\n" + json.dumps(verdict), prompt_tokens=300, completion_tokens=40, cost=0.0004))


def draft_cancel() -> Reply:
    return Reply(
        json=completion(None, tool_calls=[tool_call("cancel_pending_order", CANCEL, "d1")], prompt_tokens=200, completion_tokens=20, cost=0.001)
    )


def text(content: str, cost: float | None = 0.002) -> Reply:
    return Reply(json=completion(content, prompt_tokens=250, completion_tokens=15, cost=cost))


def role_of(body: dict[str, Any]) -> str:
    first, last = body["messages"][0], body["messages"][-1]
    if first["role"] == "system" and str(first["content"]).startswith(CHECKER_MARKER):
        return "checker"
    if last["role"] == "system" and REVISION_MARKER in str(last["content"]):
        return "revision"
    return "draft"


def play(upstream: ScriptedUpstream, **steps: Reply | Reset | list[Reply | Reset]) -> dict[str, list[dict[str, Any]]]:
    """Answer each role (draft, checker, revision) with its step (or its next
    step, for a list); returns the bodies each role received."""
    seen: dict[str, list[dict[str, Any]]] = {"draft": [], "checker": [], "revision": []}
    queues = {k: list(v) if isinstance(v, list) else [v] for k, v in steps.items()}

    def handler(body: Any) -> Reply | Reset:
        role = role_of(body)
        seen[role].append(body)
        queue = queues.get(role)
        if not queue:
            raise AssertionError(f"unexpected {role} call")
        return queue.pop(0) if len(queue) > 1 else queue[0]

    upstream.handler = handler
    return seen


def ask(openai_client: openai.OpenAI, model: str = MODEL, **extra: Any):
    return openai_client.chat.completions.with_raw_response.create(
        model=model, messages=MESSAGES, tools=TOOLS, tool_choice="auto", **extra
    )


def spans_of(raw) -> dict[str, Any]:
    trace = Trace.objects.get(request_id=raw.headers["x-request-id"])
    return {"trace": trace, "spans": list(trace.spans.order_by("seq"))}


# --- Labels -------------------------------------------------------------------
def test_approved_returns_the_draft_with_summed_usage_and_cost(openai_client, upstream):
    seen = play(upstream, draft=draft_cancel(), checker=approve())
    raw = ask(openai_client, extra_body={"reasoning_effort": "high"})
    reply = raw.parse()
    assert raw.headers["x-marina-verify"] == "approved"
    assert reply.model == MODEL
    assert reply.choices[0].message.tool_calls[0].function.name == "cancel_pending_order"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (500, 27, 527)
    assert raw.headers["x-marina-cost-usd"] == "0.00130000"
    assert raw.headers["x-marina-upstream-model"] == "openrouter/prop"
    assert raw.headers["x-marina-lessons"] == "0"
    assert "x-marina-cost-unpriced-calls" not in raw.headers

    draft, review = seen["draft"][0], seen["checker"][0]
    assert draft["model"] == "prop" and draft["tools"] == TOOLS and draft["messages"] == MESSAGES
    assert draft["reasoning_effort"] == "high"
    assert review["model"] == "check" and "tools" not in review
    assert review["reasoning_effort"] == "high", "the caller's effort carries over to the checker"
    shown = unframe(review["messages"][1]["content"])
    assert shown["rules"] == POLICY
    assert any(t.startswith("cancel_pending_order [write]") for t in shown["tools"])
    assert any(t.startswith("get_order_details [read-only]") for t in shown["tools"])
    assert shown["draft"]["calls"][0].startswith('cancel_pending_order({"order_id": "#W1234567"')
    assert seen["revision"] == []


def test_revised_returns_the_revision_and_traces_every_step(openai_client, upstream):
    seen = play(upstream, draft=draft_cancel(), checker=revise(), revision=text(CONFIRM_TEXT))
    raw = ask(openai_client)
    reply = raw.parse()
    assert raw.headers["x-marina-verify"] == "revised"
    assert reply.choices[0].message.content == CONFIRM_TEXT and not reply.choices[0].message.tool_calls
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (750, 75)
    assert raw.headers["x-marina-cost-usd"] == "0.00340000"

    note = seen["revision"][0]["messages"][-1]
    assert seen["revision"][0]["messages"][:-1] == MESSAGES and seen["revision"][0]["tools"] == TOOLS
    assert note["role"] == "system"
    assert "Ask the user to confirm before cancelling." in note["content"]
    assert "obtain explicit user confirmation (yes)" in note["content"]
    assert "CALL cancel_pending_order(" in note["content"]

    found = spans_of(raw)
    trace, spans = found["trace"], found["spans"]
    assert (trace.route, trace.formation_label, trace.requested_model) == ("verify", "revised", MODEL)
    # The lesson recall (none stored: nothing recalled) is a span of its own, not an upstream call.
    assert [s.name for s in spans] == ["verify", "lessons", "draft", "review", "revision"]
    verify = spans[0]
    assert all(s.parent_seq == verify.seq for s in spans[1:])
    assert spans[1].provider == "" and spans[1].detail == {"mode": "on", "query": "last-user-turn", "ids": [], "injected": False}
    assert [(s.upstream_model, s.prompt_tokens, s.completion_tokens, s.cost_nanousd) for s in spans[2:]] == [
        ("prop", 200, 20, 1_000_000),
        ("check", 300, 40, 400_000),
        ("prop", 250, 15, 2_000_000),
    ]
    assert all(s.duration_ms > 0 for s in spans)
    assert verify.duration_ms >= sum(s.duration_ms for s in spans[1:])
    assert verify.provider == "" and verify.cost_nanousd is None, "the parent span is not an upstream call"
    assert (trace.prompt_tokens, trace.completion_tokens, trace.cost_nanousd) == (750, 75, 3_400_000)
    detail = verify.detail
    assert detail["label"] == "revised" and detail["verdict"] == "revise"
    quote = "obtain explicit user confirmation (yes)"  # with bodies off: its length and hash, never the words
    assert detail["conflict"] == {"quote_chars": len(quote), "quote_hash": digest([quote]), "call": "cancel_pending_order", "argument": None}
    assert detail["guard"] == "accepted" and "dropped cancel_pending_order" in detail["guard_reason"]
    assert detail["proposer"] == "openrouter/prop" and detail["checker"] == "openrouter/check"
    assert spans[3].detail["verdict"] == "revise" and spans[4].detail["guard"] == "accepted"
    assert CONFIRM_TEXT not in json.dumps(detail), "no conversation bodies in the detail"

    rows = {(r.provider, r.upstream_model): r for r in SpendDaily.objects.all()}
    assert set(rows) == {("openrouter", "prop"), ("openrouter", "check")}
    prop, check = rows[("openrouter", "prop")], rows[("openrouter", "check")]
    assert (prop.calls, prop.prompt_tokens, prop.cost_nanousd, prop.requested_model) == (2, 450, 3_000_000, MODEL)
    assert (check.calls, check.completion_tokens, check.cost_nanousd, check.key_name) == (1, 40, 400_000, "tester")


def test_held_write_returns_the_draft_when_the_revision_changes_a_write_unjustified(openai_client, upstream):
    changed = Reply(json=completion(None, tool_calls=[tool_call("cancel_pending_order", {**CANCEL, "reason": "no longer needed"}, "r1")]))
    play(upstream, draft=draft_cancel(), checker=revise(argument=None), revision=changed)
    raw = ask(openai_client)
    call = raw.parse().choices[0].message.tool_calls[0]
    assert raw.headers["x-marina-verify"] == "held-write"
    assert json.loads(call.function.arguments) == CANCEL, "the draft stands"
    spans = spans_of(raw)["spans"]
    assert spans[0].detail["guard"] == "held"
    assert "cites no argument" in spans[0].detail["guard_reason"]
    assert spans[-1].name == "revision" and spans[-1].detail["guard"] == "held"


def test_revised_when_the_cited_argument_is_the_only_change(openai_client, upstream):
    changed = Reply(json=completion(None, tool_calls=[tool_call("cancel_pending_order", {**CANCEL, "reason": "other"}, "r1")]))
    play(upstream, draft=draft_cancel(), checker=revise(quote="I ordered it by mistake", argument="reason"), revision=changed)
    raw = ask(openai_client)
    assert raw.headers["x-marina-verify"] == "revised"
    assert json.loads(raw.parse().choices[0].message.tool_calls[0].function.arguments)["reason"] == "other"


@pytest.mark.parametrize(
    "checker",
    [
        Reply(status=500, json={"error": {"message": "boom"}}),
        Reset(),
        text("Looks fine to me."),  # no JSON verdict
        text('{"verdict": "revise", "fix": ""}'),  # revise with nothing to do
    ],
    ids=["http-500", "connection-reset", "prose", "revise-without-fix"],
)
def test_checker_unavailable_fails_open_with_the_draft(openai_client, upstream, checker):
    seen = play(upstream, draft=draft_cancel(), checker=checker)
    raw = ask(openai_client)
    assert raw.status_code == 200
    assert raw.headers["x-marina-verify"] == "checker-unavailable"
    assert raw.parse().choices[0].message.tool_calls[0].function.name == "cancel_pending_order"
    assert seen["revision"] == []
    trace = spans_of(raw)["trace"]
    assert (trace.status, trace.formation_label) == ("ok", "checker-unavailable")


@pytest.mark.parametrize("revision", [Reply(status=502, json={"error": {"message": "down"}}), text("")], ids=["http-502", "empty"])
def test_revision_failed_returns_the_draft(openai_client, upstream, revision):
    play(upstream, draft=draft_cancel(), checker=revise(), revision=revision)
    raw = ask(openai_client)
    assert raw.headers["x-marina-verify"] == "revision-failed"
    assert raw.parse().choices[0].message.tool_calls[0].function.name == "cancel_pending_order"


def test_flagged_when_rounds_is_zero(openai_client, upstream, settings):
    settings.MARINA_VERIFY_ROUNDS = 0
    seen = play(upstream, draft=draft_cancel(), checker=revise())
    raw = ask(openai_client)
    assert raw.headers["x-marina-verify"] == "flagged"
    assert raw.parse().choices[0].message.tool_calls[0].function.name == "cancel_pending_order"
    assert len(seen["checker"]) == 1 and seen["revision"] == []


def test_approved_with_rounds_zero(openai_client, upstream, settings):
    settings.MARINA_VERIFY_ROUNDS = 0
    play(upstream, draft=draft_cancel(), checker=approve())
    assert ask(openai_client).headers["x-marina-verify"] == "approved"


def test_two_rounds_review_the_revision_and_keep_revised(openai_client, upstream, settings):
    settings.MARINA_VERIFY_ROUNDS = 2
    seen = play(upstream, draft=draft_cancel(), checker=[revise(), approve()], revision=text(CONFIRM_TEXT))
    raw = ask(openai_client)
    assert raw.headers["x-marina-verify"] == "revised"
    assert len(seen["checker"]) == 2
    assert unframe(seen["checker"][1]["messages"][1]["content"])["draft"]["text"] == CONFIRM_TEXT
    assert [s.name for s in spans_of(raw)["spans"]] == ["verify", "lessons", "draft", "review", "revision", "review"]


# --- Checker choice and effort --------------------------------------------------
def test_checker_defaults_to_the_setting_then_the_proposer(openai_client, upstream, settings):
    seen = play(upstream, draft=text("hi"), checker=approve())
    settings.MARINA_VERIFY_CHECKER_MODEL = "openrouter/configured-checker"
    ask(openai_client, model="marina/verify:openrouter/prop")
    settings.MARINA_VERIFY_CHECKER_MODEL = ""
    ask(openai_client, model="marina/verify:openrouter/prop")
    assert [b["model"] for b in seen["checker"]] == ["configured-checker", "prop"]


@pytest.mark.parametrize(("effort", "expected"), [("low", {"reasoning_effort": "low"}), ("off", {})])
def test_checker_effort_setting(openai_client, upstream, settings, effort, expected):
    settings.MARINA_VERIFY_CHECKER_EFFORT = effort
    seen = play(upstream, draft=text("hi"), checker=approve())
    ask(openai_client, extra_body={"reasoning_effort": "high"})
    assert {k: v for k, v in seen["checker"][0].items() if k == "reasoning_effort"} == expected
    assert seen["draft"][0]["reasoning_effort"] == "high"


def test_unpriced_calls_are_counted_in_a_header(openai_client, upstream):
    play(upstream, draft=text("hi", cost=None), checker=approve())
    raw = ask(openai_client)
    assert raw.headers["x-marina-cost-usd"] == "0.00030000", "the priced checker call only"
    assert raw.headers["x-marina-cost-unpriced-calls"] == "1"
    assert SpendDaily.objects.get(upstream_model="prop").unpriced_calls == 1


# --- Errors ---------------------------------------------------------------------
def test_a_proposer_error_is_relayed(openai_client, upstream):
    play(upstream, draft=Reply(status=429, json={"error": {"message": "slow down", "code": "rate_limited"}}))
    with pytest.raises(openai.RateLimitError) as caught:
        ask(openai_client)
    assert caught.value.body == {"message": "slow down", "code": "rate_limited"}
    trace = Trace.objects.get()
    assert (trace.status, trace.http_status) == ("error", 429)
    assert [s.name for s in trace.spans.order_by("seq")] == ["verify", "lessons", "draft"]


def test_a_proposer_reply_without_a_message_is_a_502(openai_client, upstream):
    play(upstream, draft=Reply(json={"id": "x", "object": "chat.completion", "choices": []}))
    with pytest.raises(openai.InternalServerError) as caught:
        ask(openai_client)
    assert caught.value.status_code == 502 and caught.value.body["code"] == "upstream_error"
    verify = Trace.objects.get().spans.get(name="verify")
    assert (verify.status, verify.error_kind) == ("error", "bad_reply")


@pytest.mark.parametrize("stream", [False, True])
def test_n_is_unsupported(openai_client, upstream, stream):
    with pytest.raises(openai.BadRequestError) as caught:
        ask(openai_client, n=2, stream=stream)
    error = caught.value.body
    assert (error["code"], error["param"]) == ("unsupported_parameter", "n")
    assert error["message"].startswith("Unsupported parameter: 'n'.")
    assert upstream.requests == []


@pytest.mark.parametrize(
    "model",
    [
        "marina/verify:nowhere/x",
        "marina/verify:openrouter/x+nowhere/y",
        "marina/verify:",
        "marina/verify:openrouter/x+",
        "marina/verify:together/x",  # an aggregator without its key
    ],
)
def test_ids_the_passthru_cannot_serve_are_400_model_not_found(openai_client, upstream, model):
    with pytest.raises(openai.BadRequestError) as caught:
        ask(openai_client, model=model)
    assert (caught.value.body["code"], caught.value.body["param"]) == ("model_not_found", "model")
    assert upstream.requests == []


def test_split_id_uses_the_last_plus():
    assert split_id("marina/verify:openrouter/a+b+openrouter/c") == ("openrouter/a+b", "openrouter/c")
    assert split_id("marina/verify:openrouter/a") == ("openrouter/a", None)
    assert split_id("marina/verify:+openrouter/a") == ("+openrouter/a", None)


# --- τ²'s client ----------------------------------------------------------------
def test_litellm_the_way_tau2_calls_it(marina_url, upstream):
    import litellm

    assert os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"

    seen = play(upstream, draft=draft_cancel(), checker=revise(), revision=text(CONFIRM_TEXT))
    litellm.drop_params = True
    response = litellm.completion(
        model="openai/marina/verify:openrouter/x+openrouter/y",
        messages=MESSAGES,
        tools=TOOLS,
        tool_choice="auto",
        api_base=f"{marina_url}/v1",
        api_key=MARINA_KEY,
        extra_body={"reasoning_effort": "high"},
        num_retries=0,
    )
    assert response.choices[0].message.content == CONFIRM_TEXT
    assert response.usage.prompt_tokens == 750
    assert [b["model"] for b in seen["draft"] + seen["checker"] + seen["revision"]] == ["x", "y", "x"]
    assert seen["draft"][0]["reasoning_effort"] == "high" and seen["checker"][0]["reasoning_effort"] == "high"
    trace = Trace.objects.get()
    assert (trace.requested_model, trace.formation_label) == ("marina/verify:openrouter/x+openrouter/y", "revised")
