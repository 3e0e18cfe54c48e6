"""marina/obligations: and marina/argcheck: end to end: the openai SDK -> Marina
in-process -> the scripted upstream playing the agent, the extractor and the
judges. Asserts the exact sequence of upstream calls, where the trailing note
lands, the headers and counters, and the stored conversation state."""
from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from ledger.models import Trace
from passthru.formations import state
from passthru.formations.argcheck import prompts as argcheck_prompts
from passthru.formations.obligations import prompts as obligations_prompts
from passthru.models import ConversationState
from tests.passthru.formations.play import (
    CANCEL_OBLIGATION,
    OPENING,
    TOOLS,
    Play,
    calls,
    extracted,
    json_reply,
    text,
)
from tests.upstream import Reply, Reset, tool_call

OB = "marina/obligations:openrouter/agent"
AC = "marina/argcheck:openrouter/agent"
ASK_CONFIRM = "Order #W1234567 is pending. Shall I cancel it (yes/no)?"


def ask(openai_client: openai.OpenAI, model: str, messages: list[dict[str, Any]] = OPENING, session: str | None = "s1", tools: Any = TOOLS, **headers: str):
    extra = {k.replace("_", "-"): v for k, v in headers.items()}
    if session:
        extra["x-marina-session"] = session
    kwargs: dict[str, Any] = {"tools": tools} if tools else {}
    return openai_client.chat.completions.with_raw_response.create(model=model, messages=messages, extra_headers=extra, **kwargs)


def stored_state(messages: list[dict[str, Any]], model: str, session: str = "s1") -> dict[str, Any]:
    """The state stored after the turn that sent `messages`, opened (the row holds it sealed)."""
    kept = state.checkpoint_sync(state.conversation("tester", session, messages, TOOLS, model=model))
    assert kept is not None, "a checkpoint after that turn"
    return kept


def trace_of(raw) -> Trace:
    return Trace.objects.get(request_id=raw.headers["x-request-id"])


# --- No opt-in: the upstream gets the client's body byte for byte --------------------
def test_without_opt_in_the_body_is_byte_identical(openai_client, upstream):
    ask(openai_client, "openrouter/agent")
    ask(openai_client, OB, x_marina_obligations="off")
    ask(openai_client, "marina/argcheck:marina/obligations:openrouter/agent", x_marina_obligations="off", x_marina_argcheck="0")
    plain, off, both_off = upstream.requests
    assert plain.raw == off.raw == both_off.raw
    assert plain.body["messages"] == OPENING and plain.body["model"] == "agent"
    assert ConversationState.objects.count() == 0


def test_a_bad_header_value_is_a_400(openai_client, upstream):
    with pytest.raises(openai.BadRequestError) as caught:
        ask(openai_client, OB, x_marina_obligations="maybe")
    assert "x-marina-obligations must be on, observe or off" in caught.value.body["message"]
    assert upstream.requests == []


# --- Obligations --------------------------------------------------------------------
def test_extract_then_main_with_the_reminder_as_trailing_note(openai_client, upstream):
    play = Play(upstream, extract=extracted(CANCEL_OBLIGATION), main=text(ASK_CONFIRM), judge=json_reply({"o1": "waiting"}))
    raw = ask(openai_client, OB)
    assert play.calls == ["extract", "main", "judge"]
    main = play.bodies["main"][0]
    assert main["model"] == "agent" and main["tools"] == TOOLS
    assert main["messages"][0] == OPENING[0], "system text untouched"
    last = main["messages"][-1]
    assert last["role"] == "user" and len(main["messages"]) == 2
    assert last["content"].startswith(OPENING[1]["content"] + "\n\n" + obligations_prompts.REMINDER_MARKER)
    assert "o1: cancel order #W1234567 (target: #W1234567)" in last["content"]
    extract = play.bodies["extract"][0]
    assert "cancel_pending_order" in extract["messages"][1]["content"] and "get_order_details" not in extract["messages"][1]["content"]
    assert raw.headers["x-marina-obligations"] == "on;open=1;satisfied=0;declined=0;nudges=0;extract=ok;check=handled"
    assert raw.parse().choices[0].message.content == ASK_CONFIRM
    # extract 0.0001 + main 0.001 + judge 0.0001
    assert raw.headers["x-marina-cost-usd"] == "0.00120000"
    assert raw.headers["x-marina-obligations-cost-usd"] == "0.00020000"
    trace = trace_of(raw)
    assert (trace.route, trace.formation_label) == ("obligations", "obligations=handled")
    spans = list(trace.spans.order_by("seq"))
    assert [s.name for s in spans] == ["obligations", "extract", "draft", "judge"]
    assert all(s.parent_seq == 0 for s in spans[1:])
    assert spans[1].detail["added"] == ["o1"] and spans[3].detail["verdicts"] == {"o1": "waiting"}
    assert [s.cost_nanousd for s in spans[1:]] == [100_000, 1_000_000, 100_000]


def test_a_trailing_tool_result_gets_the_note_as_a_new_user_turn(openai_client, upstream):
    Play(upstream, extract=extracted(CANCEL_OBLIGATION), main=calls(("get_order_details", {"order_id": "#W1234567"})))
    ask(openai_client, OB)
    play = Play(upstream, main=text(ASK_CONFIRM), judge=json_reply({"o1": "waiting"}))
    history = [
        *OPENING,
        {"role": "assistant", "content": None, "tool_calls": [tool_call("get_order_details", {"order_id": "#W1234567"}, "c0")]},
        {"role": "tool", "tool_call_id": "c0", "content": '{"status": "pending"}'},
    ]
    raw = ask(openai_client, OB, history)
    assert play.calls == ["main", "judge"], "no new user turn: no extraction"
    sent = play.bodies["main"][0]["messages"]
    assert sent[:-1] == history
    assert sent[-1]["role"] == "user" and sent[-1]["content"].startswith(obligations_prompts.REMINDER_MARKER)
    assert raw.headers["x-marina-obligations"] == "on;open=1;satisfied=0;declined=0;nudges=0;check=handled"


def test_an_owed_reply_is_judged_and_retried_once_quoting_the_draft(openai_client, upstream):
    draft = "I have noted your request."
    play = Play(
        upstream,
        extract=extracted(CANCEL_OBLIGATION),
        main=text(draft),
        judge=json_reply({"o1": "owed"}),
        retry=calls(("cancel_pending_order", {"order_id": "#W1234567", "reason": "ordered by mistake"})),
    )
    raw = ask(openai_client, OB)
    assert play.calls == ["extract", "main", "judge", "retry"]
    note = play.bodies["retry"][0]["messages"][-1]["content"]
    assert obligations_prompts.NUDGE_MARKER in note and draft in note and "o1: cancel order" in note
    reply = raw.parse()
    assert reply.choices[0].message.tool_calls[0].function.name == "cancel_pending_order", "the retry, as written"
    assert raw.headers["x-marina-obligations"] == "on;open=1;satisfied=0;declined=0;nudges=1;extract=ok;check=nudged-acted"
    # extract + draft (discarded) + judge = 0.0001 + 0.001 + 0.0001; the total adds the retry
    assert raw.headers["x-marina-obligations-cost-usd"] == "0.00120000"
    assert raw.headers["x-marina-cost-usd"] == "0.00220000"
    assert reply.usage.prompt_tokens == 50 + 100 + 50 + 100
    assert [s.name for s in trace_of(raw).spans.order_by("seq")] == ["obligations", "extract", "draft", "judge", "retry"]
    # Never nudged twice: the next final reply that leaves it open is not judged again.
    play.script(main=text("Anything else?"))
    history = [*OPENING, {"role": "assistant", "content": "Done?"}, {"role": "user", "content": "ok"}]
    play.script(extract=extracted(), main=text("Anything else?"))
    raw = ask(openai_client, OB, history)
    assert play.calls == ["extract", "main"]
    assert raw.headers["x-marina-obligations"].endswith("nudges=1;extract=ok;check=none-open")


def test_a_successful_write_settles_and_a_transfer_hands_off(openai_client, upstream):
    Play(upstream, extract=extracted(CANCEL_OBLIGATION, {"request": 1, "what": "refund the gift card", "target": "", "tools": []}), main=text("Confirm?"), judge=json_reply({"o1": "waiting", "o2": "waiting"}))
    ask(openai_client, OB)
    history = [
        *OPENING,
        {"role": "assistant", "content": "Confirm?"},
        {"role": "user", "content": "yes"},
        {"role": "assistant", "content": None, "tool_calls": [tool_call("cancel_pending_order", {"order_id": "#W1234567", "reason": "mistake"}, "k1")]},
        {"role": "tool", "tool_call_id": "k1", "content": '{"order_id": "#W1234567", "status": "cancelled"}'},
    ]
    play = Play(upstream, extract=extracted(), main=calls(("transfer_to_human_agents", {"summary": "refund"})))
    raw = ask(openai_client, OB, history)
    assert play.calls == ["extract", "main"]
    assert raw.headers["x-marina-obligations"] == "on;open=1;satisfied=1;declined=0;nudges=0;extract=ok;check=tool-call"
    history += [
        {"role": "assistant", "content": None, "tool_calls": [tool_call("transfer_to_human_agents", {"summary": "refund"}, "t1")]},
        {"role": "tool", "tool_call_id": "t1", "content": "Transfer successful"},
    ]
    play.script(main=text("You are being transferred."))
    raw = ask(openai_client, OB, history)
    assert play.calls == ["main"], "nothing open: no judgement"
    assert raw.headers["x-marina-obligations"] == "on;open=0;satisfied=1;declined=1;nudges=0;check=none-open"
    stored = stored_state(history, OB)["obligations"]
    assert [(i["id"], i["status"], i["by"]) for i in stored["items"]] == [
        ("o1", "satisfied", "tool:cancel_pending_order"),
        ("o2", "declined", "transfer:transfer_to_human_agents"),
    ]


def test_a_failed_write_settles_nothing(openai_client, upstream):
    Play(upstream, extract=extracted(CANCEL_OBLIGATION), main=text("Confirm?"), judge=json_reply({"o1": "waiting"}))
    ask(openai_client, OB)
    history = [
        *OPENING,
        {"role": "assistant", "content": None, "tool_calls": [tool_call("cancel_pending_order", {"order_id": "#W1234567"}, "k1")]},
        {"role": "tool", "tool_call_id": "k1", "content": "Error: order is not pending"},
    ]
    Play(upstream, main=calls(("get_order_details", {"order_id": "#W1234567"})))
    raw = ask(openai_client, OB, history)
    assert raw.headers["x-marina-obligations"].startswith("on;open=1;satisfied=0;")


def test_observe_records_without_note_or_retry(openai_client, upstream):
    play = Play(upstream, extract=extracted(CANCEL_OBLIGATION), main=text("Noted."))
    raw = ask(openai_client, "openrouter/agent", x_marina_obligations="observe")
    assert play.calls == ["extract", "main"]
    assert play.bodies["main"][0]["messages"] == OPENING, "no note in observe mode"
    assert raw.headers["x-marina-obligations"] == "observe;open=1;satisfied=0;declined=0;nudges=0;extract=ok;check=observe"
    assert ConversationState.objects.count() == 1
    assert stored_state(OPENING, "openrouter/agent")["obligations"]["items"][0]["what"] == "cancel order #W1234567"


def test_without_tools_the_ledger_is_skipped(openai_client, upstream):
    play = Play(upstream, main=text("Hello."))
    raw = ask(openai_client, OB, tools=None)
    assert play.calls == ["main"]
    assert raw.headers["x-marina-obligations"] == "on;skipped=no-tools"


@pytest.mark.parametrize(
    "judge",
    [Reply(status=503, json={"error": {"message": "down"}}), Reset(), json_reply("no idea")],
    ids=["http-503", "reset", "unreadable"],
)
def test_judge_outages_fail_open_with_the_draft(openai_client, upstream, judge):
    play = Play(upstream, extract=extracted(CANCEL_OBLIGATION), main=text("Noted."), judge=judge)
    raw = ask(openai_client, OB)
    assert raw.status_code == 200 and raw.parse().choices[0].message.content == "Noted."
    assert play.calls == ["extract", "main", "judge"]
    expected = "unjudged" if isinstance(judge, Reply) and judge.status == 200 else "judge-failed"
    assert raw.headers["x-marina-obligations"].endswith(f"extract=ok;check={expected}")


def test_an_extraction_outage_fails_open(openai_client, upstream):
    play = Play(upstream, extract=Reply(status=500, json={"error": {"message": "x"}}), main=text("Hi."))
    raw = ask(openai_client, OB)
    assert play.calls == ["extract", "main"]
    assert raw.headers["x-marina-obligations"] == "on;open=0;satisfied=0;declined=0;nudges=0;extract=failed;check=none-open"
    assert play.bodies["main"][0]["messages"] == OPENING


def test_a_failed_retry_returns_the_draft(openai_client, upstream):
    Play(upstream, extract=extracted(CANCEL_OBLIGATION), main=text("Noted."), judge=json_reply({"o1": "owed"}), retry=Reply(status=500, json={"error": {"message": "x"}}))
    raw = ask(openai_client, OB)
    assert raw.parse().choices[0].message.content == "Noted."
    assert raw.headers["x-marina-obligations"].endswith("check=nudge-failed")


def test_the_obligations_model_setting_serves_the_ledger_calls(openai_client, upstream, settings):
    settings.MARINA_OBLIGATIONS_MODEL = "openrouter/cheap"
    play = Play(upstream, extract=extracted(CANCEL_OBLIGATION), main=text(ASK_CONFIRM), judge=json_reply({"o1": "waiting"}))
    ask(openai_client, OB)
    assert [play.bodies[r][0]["model"] for r in ("extract", "main", "judge")] == ["cheap", "agent", "cheap"]


def test_the_derived_key_keeps_two_conversations_apart_once_they_diverge(openai_client, upstream):
    Play(upstream, extract=extracted(CANCEL_OBLIGATION), main=text(ASK_CONFIRM), judge=json_reply({"o1": "waiting"}))
    ask(openai_client, OB, session=None)
    a = [*OPENING, {"role": "assistant", "content": ASK_CONFIRM}, {"role": "user", "content": "yes"}]
    b = [*OPENING, {"role": "assistant", "content": ASK_CONFIRM}, {"role": "user", "content": "no, keep it"}]
    play = Play(upstream, extract=extracted(cancel=["o1"]), main=text("Kept."))
    raw_b = ask(openai_client, OB, b, session=None)
    assert raw_b.headers["x-marina-obligations"].startswith("on;open=0;satisfied=0;declined=1")
    play.script(extract=extracted(), main=text("Cancelling."), judge=json_reply({"o1": "waiting"}))
    raw_a = ask(openai_client, OB, a, session=None)
    assert raw_a.headers["x-marina-obligations"].startswith("on;open=1;"), "b's cancellation did not reach a"


STACKED = "marina/obligations:marina/argcheck:openrouter/agent"


@pytest.mark.parametrize("session", [None, "run-1"], ids=["derived-key", "session"])
def test_a_conversation_sent_twice_is_extracted_judged_and_nudged_the_same_way_twice(openai_client, upstream, session):
    # Two runs with one key and τ²'s default seed: the second once read the first's later state,
    # made no extraction and passed its cancel call unjudged.
    def run() -> list[tuple[list[str], str, str]]:
        seen = []
        play = Play(
            upstream,
            extract=extracted(CANCEL_OBLIGATION),
            main=calls(CANCEL_INVENTED),
            argjudge=json_reply({"supported": False, "doubt": "order_id"}),
            retry=calls(CANCEL_INVENTED),
        )
        history = list(OPENING)
        for turn in range(2):
            raw = openai_client.chat.completions.with_raw_response.create(
                model=STACKED, messages=history, tools=TOOLS, seed=300,
                extra_headers={"x-marina-session": session} if session else {},
            )
            seen.append((list(play.calls), raw.headers["x-marina-obligations"], raw.headers["x-marina-argcheck"]))
            history += [
                {"role": "assistant", "content": None, "tool_calls": [tool_call(*CANCEL_INVENTED, f"t{turn}")]},
                {"role": "tool", "tool_call_id": f"t{turn}", "content": "Error: order not found"},
            ]
            play.script(main=calls(CANCEL_INVENTED))
        return seen

    first = run()
    assert first[0] == (
        ["extract", "main", "argjudge", "retry"],
        "on;open=1;satisfied=0;declined=0;nudges=0;extract=ok;check=tool-call",
        "on;writes=1;checked=1;flagged=1;judged=1;nudges=1;check=nudged-kept",
    )
    assert first[1][0] == ["main"] and first[1][2].endswith("judged=0;nudges=1;check=repeat"), "the turn's own nudge, remembered"
    assert run() == first, "the same extraction, judgement and nudge the second time"


# --- Argument check -------------------------------------------------------------------
CANCEL_INVENTED = ("cancel_pending_order", {"order_id": "#W7654321", "reason": "mistake"})
CANCEL_STATED = ("cancel_pending_order", {"order_id": "#W1234567", "reason": "mistake"})


def test_argcheck_flags_an_unstated_value_judges_and_retries_naming_it(openai_client, upstream):
    play = Play(upstream, main=calls(CANCEL_INVENTED), argjudge=json_reply({"supported": False, "doubt": "order_id"}), retry=calls(CANCEL_INVENTED))
    raw = ask(openai_client, AC)
    assert play.calls == ["main", "argjudge", "retry"]
    note = play.bodies["retry"][0]["messages"][-1]["content"]
    assert argcheck_prompts.NOTE_MARKER in note and "order_id = #w7654321: not found in the conversation" in note
    assert "#W1234567" not in note.split(argcheck_prompts.NOTE_MARKER)[1], "the note proposes no value"
    assert raw.headers["x-marina-argcheck"] == "on;writes=1;checked=1;flagged=1;judged=1;nudges=1;check=nudged-kept"
    assert raw.headers["x-marina-argcheck-cost-usd"] == "0.00110000"
    # The same call issued again, in the conversation's next turn, passes unjudged.
    play.script(main=calls(CANCEL_INVENTED))
    later = [
        *OPENING,
        {"role": "assistant", "content": None, "tool_calls": [tool_call(*CANCEL_INVENTED, "c0")]},
        {"role": "tool", "tool_call_id": "c0", "content": "Error: order not found"},
    ]
    raw = ask(openai_client, AC, later)
    assert play.calls == ["main"]
    assert raw.headers["x-marina-argcheck"] == "on;writes=1;checked=0;flagged=0;judged=0;nudges=1;check=repeat"


def test_argcheck_passes_stated_values_without_a_judge(openai_client, upstream):
    play = Play(upstream, main=calls(CANCEL_STATED))
    raw = ask(openai_client, AC)
    assert play.calls == ["main"]
    assert raw.headers["x-marina-argcheck"] == "on;writes=1;checked=1;flagged=0;judged=0;nudges=0;check=supported"
    assert raw.headers["x-marina-argcheck-cost-usd"] == "0.00000000"


def test_argcheck_all_writes_judges_every_write(openai_client, upstream, settings):
    settings.MARINA_ARGCHECK_TRIGGER = "all-writes"
    play = Play(upstream, main=calls(CANCEL_STATED), argjudge=json_reply({"supported": True}))
    raw = ask(openai_client, AC)
    assert play.calls == ["main", "argjudge"]
    assert raw.headers["x-marina-argcheck"].endswith("judged=1;nudges=0;check=judged-supported")


def test_argcheck_ignores_lookups(openai_client, upstream):
    play = Play(upstream, main=calls(("get_order_details", {"order_id": "#W999"})))
    raw = ask(openai_client, AC)
    assert play.calls == ["main"] and raw.headers["x-marina-argcheck"].endswith("check=no-write")


def test_argcheck_observe_judges_without_retry(openai_client, upstream):
    play = Play(upstream, main=calls(CANCEL_INVENTED), argjudge=json_reply({"supported": False}))
    raw = ask(openai_client, "openrouter/agent", x_marina_argcheck="observe")
    assert play.calls == ["main", "argjudge"]
    assert raw.headers["x-marina-argcheck"] == "observe;writes=1;checked=1;flagged=1;judged=1;nudges=0;check=unsupported"
    assert json.loads(raw.parse().choices[0].message.tool_calls[0].function.arguments)["order_id"] == "#W7654321"


@pytest.mark.parametrize("judge", [Reply(status=500, json={"error": {"message": "x"}}), Reset()], ids=["http-500", "reset"])
def test_argcheck_judge_outage_fails_open(openai_client, upstream, judge):
    play = Play(upstream, main=calls(CANCEL_INVENTED), argjudge=judge)
    raw = ask(openai_client, AC)
    assert play.calls == ["main", "argjudge"]
    assert raw.headers["x-marina-argcheck"].endswith("check=judge-failed")
    assert raw.parse().choices[0].message.tool_calls[0].function.name == "cancel_pending_order"


# --- Stacking ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "model",
    ["marina/obligations:marina/argcheck:openrouter/agent", "marina/argcheck:marina/obligations:openrouter/agent"],
)
def test_both_prefixes_in_either_order(openai_client, upstream, model):
    play = Play(
        upstream,
        extract=extracted(CANCEL_OBLIGATION),
        main=calls(CANCEL_INVENTED),
        argjudge=json_reply({"supported": False, "doubt": "order_id"}),
        retry=text(ASK_CONFIRM),
    )
    raw = ask(openai_client, model)
    assert play.calls == ["extract", "main", "argjudge", "retry"]
    note = play.bodies["retry"][0]["messages"][-1]["content"]
    assert note.index(obligations_prompts.REMINDER_MARKER) < note.index(argcheck_prompts.NOTE_MARKER), "one note, joined"
    assert raw.headers["x-marina-obligations"].endswith("extract=ok;check=tool-call")
    assert raw.headers["x-marina-argcheck"].endswith("check=nudged-changed")
    assert trace_of(raw).route == "obligations+argcheck"


def test_stacked_around_verify(openai_client, upstream):
    approve = json_reply({"verdict": "approve"})
    play = Play(
        upstream,
        extract=extracted(CANCEL_OBLIGATION),
        main=[text("Noted."), calls(CANCEL_STATED)],
        review=approve,
        judge=json_reply({"o1": "owed"}),
        retry=calls(CANCEL_STATED),
    )
    raw = ask(openai_client, "marina/obligations:marina/argcheck:marina/verify:openrouter/agent+openrouter/checker")
    # verify drafts and reviews; the ledger judges verify's message; the retry is a whole verify run
    assert play.calls == ["extract", "main", "review", "judge", "retry", "review"]
    assert [b["model"] for b in play.bodies["review"]] == ["checker", "checker"]
    assert raw.headers["x-marina-verify"] == "approved"
    assert raw.headers["x-marina-obligations"].endswith("check=nudged-acted")
    assert raw.headers["x-marina-argcheck"].endswith("check=supported")
    trace = trace_of(raw)
    assert trace.route == "obligations+argcheck+verify"
    names = [(s.name, s.parent_seq) for s in trace.spans.order_by("seq")]
    assert names == [
        ("obligations+argcheck+verify", None), ("extract", 0), ("verify", 0), ("lessons", 2), ("draft", 2),
        ("review", 2), ("judge", 0), ("verify", 0), ("lessons", 7), ("draft", 7), ("review", 7),
    ]  # fmt: skip


def test_the_header_opts_a_verify_id_in(openai_client, upstream):
    play = Play(upstream, main=calls(CANCEL_STATED), review=json_reply({"verdict": "approve"}))
    raw = ask(openai_client, "marina/verify:openrouter/agent", x_marina_argcheck="on")
    assert play.calls == ["main", "review"]
    assert raw.headers["x-marina-argcheck"].endswith("check=supported") and raw.headers["x-marina-verify"] == "approved"


@pytest.mark.parametrize(
    ("model", "says"),
    [
        ("marina/verify:marina/obligations:openrouter/agent", "put marina/obligations: and marina/argcheck: before marina/verify:"),
        ("marina/obligations:nowhere/x", "cannot be served"),
        ("marina/obligations:", "is empty"),
        ("marina/argcheck:marina:crew", "A crew cannot be wrapped"),
    ],
)
def test_combinations_that_cannot_work_are_a_clear_400(openai_client, upstream, model, says):
    with pytest.raises(openai.BadRequestError) as caught:
        ask(openai_client, model)
    assert says in caught.value.body["message"]
    assert upstream.requests == []


@pytest.mark.parametrize("stream", [False, True])
def test_n_above_one_is_refused_with_a_400(openai_client, upstream, stream):
    with pytest.raises(openai.BadRequestError) as caught:
        openai_client.chat.completions.create(model=OB, messages=OPENING, tools=TOOLS, n=2, stream=stream)
    assert (caught.value.body["code"], caught.value.body["param"]) == ("unsupported_parameter", "n")
    assert upstream.requests == []


def test_an_agent_error_is_relayed_and_its_retry_starts_from_the_same_state(openai_client, upstream):
    Play(upstream, extract=extracted(CANCEL_OBLIGATION), main=Reply(status=429, json={"error": {"message": "slow"}}))
    with pytest.raises(openai.RateLimitError):
        ask(openai_client, OB)
    assert ConversationState.objects.count() == 0, "no answer, nothing to build on: nothing stored"
    play = Play(upstream, extract=extracted(CANCEL_OBLIGATION), main=text(ASK_CONFIRM), judge=json_reply({"o1": "waiting"}))
    raw = ask(openai_client, OB)
    assert play.calls == ["extract", "main", "judge"], "the retry reads what the failed turn read"
    assert raw.headers["x-marina-obligations"].startswith("on;open=1;")
    assert stored_state(OPENING, OB)["obligations"]["turns"] == 1


def test_models_lists_only_callable_ids_and_api_formations_the_templates(openai_client, upstream, settings):
    """An OpenAI client iterating /v1/models gets ids it can call (`marina/verify:<model>` was listed);
    the templates are described at /api/formations."""
    settings.MARINA_MODEL_ALIASES = {"fast": "openrouter/openai/gpt-5.2"}
    ids = {m.id for m in openai_client.models.list()}
    assert not any("<" in model_id for model_id in ids), ids
    assert {"fast", "marina/verify:fast"} <= ids, "a formation on an alias is callable, so listed"
    openai_client.chat.completions.create(model="marina/verify:fast", messages=OPENING)  # and it is callable
    described = openai_client.with_options(base_url=str(openai_client.base_url).replace("/v1", "/api")).get("/formations", cast_to=object)
    templates = {t["template"]: t for t in described["templates"]}
    assert {"marina/verify:<model>", "marina/obligations:<model>", "marina/argcheck:<model>", "marina/lessons:<model>"} <= set(templates)
    assert templates["marina/verify:<model>"]["formation"] == "verify" and templates["marina/verify:<model>"]["about"]
