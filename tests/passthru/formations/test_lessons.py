"""Lessons at request time, end to end: the openai SDK -> Marina in-process
-> the scripted upstream. Where the lessons land (byte-identical prefix), the
three modes, the opt-ins, measurement self-exclusion, the header, the span;
and the whole loop: lessons learned from the failed τ² fixture run are
recalled on a related request."""
from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from ledger.lessons.learning import learn
from ledger.models import Lesson, Trace
from passthru.formations import lessons as recall
from passthru.formations.framing import unframe
from passthru.formations.obligations import prompts as obligations_prompts
from passthru.formations.verify.prompts import CHECKER_MARKER
from passthru.lessons_judge import UpstreamJudge
from tests.conftest import MARINA_KEY
from tests.ledger.lessons.judge_play import CONFIRM, POLICY, JudgePlay
from tests.ledger.tau2files import results
from tests.passthru.formations.play import CANCEL_OBLIGATION, TOOLS, Play, extracted, json_reply, text

SYSTEM = {"role": "system", "content": "You are an airline agent. Follow the policy."}
OPENING = {"role": "user", "content": "I want to add checked bags to my reservation and upgrade the cabin."}
LATER = [
    SYSTEM,
    OPENING,
    {"role": "assistant", "content": "Sure. What is your reservation id?"},
    {"role": "user", "content": "It is ABC123, thank you."},
]
BAGS = "Before adding checked bags, read the cabin and the membership to count the free bags."
CABIN = "Upgrading a cabin changes the fare: quote the difference and get a yes before paying."
OTHER = "Refunds go back to the original payment method; never offer a gift card instead."


@pytest.fixture
def stored(marina) -> dict[str, Lesson]:
    return {
        "bags": Lesson.objects.create(rule=BAGS, benchmark="tau2-airline", trust="trusted"),
        "cabin": Lesson.objects.create(rule=CABIN, benchmark="tau2-retail", domain="code"),
        "other": Lesson.objects.create(rule=OTHER, benchmark="tau2-airline"),
    }


def ask(openai_client: openai.OpenAI, model: str, messages: list[dict[str, Any]] | None = None, **headers: str):
    extra = {k.replace("_", "-"): v for k, v in headers.items()}
    return openai_client.chat.completions.with_raw_response.create(
        model=model, messages=messages or [SYSTEM, OPENING], extra_headers=extra
    )


def block(*rules: str) -> str:
    return "\n".join([recall.HEADING, *(f"- {r}" for r in rules)])


def ids(*lessons: Lesson) -> str:
    return ",".join(str(lesson.pk) for lesson in lessons)


def lessons_span(raw) -> Any:
    trace = Trace.objects.get(request_id=raw.headers["x-request-id"])
    return [s for s in trace.spans.all() if s.name == "lessons"]


# --- Plain requests: opt-in, trailing note, byte-identical prefix -----------------------
def test_without_opt_in_nothing_is_recalled_and_the_body_is_untouched(openai_client, upstream, stored):
    raw = ask(openai_client, "openrouter/agent")
    assert "x-marina-lessons" not in raw.headers
    assert upstream.requests[0].body["messages"] == [SYSTEM, OPENING]
    assert lessons_span(raw) == []


def test_the_prefix_puts_the_lessons_in_the_trailing_note(openai_client, upstream, stored):
    raw = ask(openai_client, "marina/lessons:openrouter/agent")
    assert raw.headers["x-marina-lessons"] == ids(stored["bags"], stored["cabin"]), "trusted first"
    sent = upstream.requests[0].body
    assert sent["model"] == "agent"
    assert sent["messages"][0] == SYSTEM, "the cacheable prefix is untouched"
    assert sent["messages"][1] == {"role": "user", "content": OPENING["content"] + "\n\n" + block(BAGS, CABIN)}
    (span,) = lessons_span(raw)
    assert span.detail == {"mode": "on", "query": "opening", "ids": [stored["bags"].pk, stored["cabin"].pk], "injected": True}
    assert span.provider == "" and span.status == "ok"


def test_the_header_opts_in_the_same_way_and_the_prefix_before_the_note_is_byte_identical(openai_client, upstream, stored):
    ask(openai_client, "marina/lessons:openrouter/agent")
    ask(openai_client, "openrouter/agent", x_marina_lessons="on")
    ask(openai_client, "openrouter/agent")
    prefixed, headed, plain = upstream.requests
    assert prefixed.raw == headed.raw
    # Everything up to the last user message's text is the plain request's, byte for byte.
    plain_text = json.dumps(OPENING["content"])[:-1].encode()
    cut = plain.raw.index(plain_text) + len(plain_text)
    assert prefixed.raw[:cut] == plain.raw[:cut]


def test_the_set_is_the_opening_requests_so_it_is_stable_across_turns(openai_client, upstream, stored):
    first = ask(openai_client, "marina/lessons:openrouter/agent")
    later = ask(openai_client, "marina/lessons:openrouter/agent", LATER)
    assert first.headers["x-marina-lessons"] == later.headers["x-marina-lessons"] != "0"
    sent = upstream.requests[1].body["messages"]
    assert sent[:-1] == LATER[:-1]
    assert sent[-1]["content"] == LATER[-1]["content"] + "\n\n" + block(BAGS, CABIN)


def test_a_trailing_tool_result_gets_the_lessons_as_a_new_user_message(openai_client, upstream, stored):
    history = [
        SYSTEM, OPENING,
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_reservation_details", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"cabin": "economy"}'},
    ]  # fmt: skip
    ask(openai_client, "marina/lessons:openrouter/agent", history)
    sent = upstream.requests[0].body["messages"]
    assert sent[:-1] == history and sent[-1] == {"role": "user", "content": block(BAGS, CABIN)}


def test_streamed_requests_get_the_lessons_too(marina, upstream, stored):
    with marina.http.stream(
        "POST", "/v1/chat/completions", headers={"authorization": f"Bearer {MARINA_KEY}"},
        json={"model": "marina/lessons:openrouter/agent", "messages": [SYSTEM, OPENING], "stream": True},
    ) as response:  # fmt: skip
        body = b"".join(response.iter_bytes())
        assert response.headers["x-marina-lessons"] == ids(stored["bags"], stored["cabin"])
    assert body.rstrip().endswith(b"data: [DONE]")
    assert upstream.requests[0].body["messages"][1]["content"].endswith(block(BAGS, CABIN))


# --- Modes -----------------------------------------------------------------------------
def test_observe_recalls_and_reports_but_injects_nothing(openai_client, upstream, stored, settings):
    ask(openai_client, "openrouter/agent")
    settings.MARINA_LESSONS = "observe"
    raw = ask(openai_client, "marina/lessons:openrouter/agent")
    assert raw.headers["x-marina-lessons"] == "observe:" + ids(stored["bags"], stored["cabin"])
    plain, observed = upstream.requests
    assert observed.raw == plain.raw
    (span,) = lessons_span(raw)
    assert span.detail["mode"] == "observe" and span.detail["injected"] is False


def test_a_request_may_ask_for_observe_on_a_server_that_injects(openai_client, upstream, stored):
    raw = ask(openai_client, "marina/lessons:openrouter/agent", x_marina_lessons="observe")
    assert raw.headers["x-marina-lessons"].startswith("observe:")
    assert upstream.requests[0].body["messages"] == [SYSTEM, OPENING]


def test_off_neither_recalls_nor_injects(openai_client, upstream, stored, settings):
    settings.MARINA_LESSONS = "off"
    raw = ask(openai_client, "marina/lessons:openrouter/agent", x_marina_lessons="on")
    assert raw.headers["x-marina-lessons"] == "0"
    assert upstream.requests[0].body["messages"] == [SYSTEM, OPENING]
    assert lessons_span(raw) == [], "off does not even recall"
    settings.MARINA_LESSONS = "on"
    raw = ask(openai_client, "marina/lessons:openrouter/agent", x_marina_lessons="off")
    assert raw.headers["x-marina-lessons"] == "0" and lessons_span(raw) == []


def test_nothing_recalled_is_reported_as_0(openai_client, upstream, stored):
    raw = ask(openai_client, "marina/lessons:openrouter/agent", [{"role": "user", "content": "What is the weather on Mars?"}])
    assert raw.headers["x-marina-lessons"] == "0"
    assert upstream.requests[0].body["messages"] == [{"role": "user", "content": "What is the weather on Mars?"}]


def test_a_bad_header_value_is_a_400(openai_client, upstream, stored):
    with pytest.raises(openai.BadRequestError) as caught:
        ask(openai_client, "openrouter/agent", x_marina_lessons="sometimes")
    assert "x-marina-lessons must be on, observe or off" in caught.value.body["message"]
    assert upstream.requests == []


# --- Measurement self-exclusion ----------------------------------------------------------
def test_a_measurement_never_sees_lessons_of_its_own_benchmark(openai_client, upstream, stored):
    # Measured on airline: not airline's lessons, and (scoped to its domain) not retail's either.
    raw = ask(openai_client, "marina/lessons:openrouter/agent", x_marina_eval="benchmark=tau2-airline; mode=measure")
    assert raw.headers["x-marina-lessons"] == "0"
    assert upstream.requests[0].body["messages"] == [SYSTEM, OPENING]
    (span,) = lessons_span(raw)
    assert span.detail["excluded_benchmark"] == "tau2-airline" and span.detail["benchmark"] == "tau2-airline"
    # A header naming the benchmark without saying training is a measurement too.
    other = ask(openai_client, "marina/lessons:openrouter/agent", x_marina_eval="benchmark=tau2-airline; mode=live")
    assert other.headers["x-marina-lessons"] == "0"
    # Marked as training: its own domain's lessons, never retail's.
    training = ask(openai_client, "marina/lessons:openrouter/agent", x_marina_eval="benchmark=tau2-airline; mode=train")
    assert training.headers["x-marina-lessons"] == ids(stored["bags"])


TAU2_POLICY = {
    "role": "system",
    "content": "<instructions>\nYou are a customer service agent...\n</instructions>\n<policy>\n# Airline Agent Policy\n\n"
    "The current time is 2024-05-15 15:00:00 EST.\n\nAs an airline agent, you can help users **book**, **modify**, "
    "or **cancel** flight reservations.\n</policy>",
}


def test_a_tau2_request_is_recognised_by_its_policy_and_measured_without_a_header(openai_client, upstream, stored):
    # τ²'s CLI sends no x-marina-eval: its policy text says which benchmark the request belongs to.
    raw = ask(openai_client, "marina/lessons:openrouter/agent", [TAU2_POLICY, OPENING])
    assert raw.headers["x-marina-lessons"] == "0"
    (span,) = lessons_span(raw)
    assert span.detail["benchmark"] == "tau2-airline" and span.detail["excluded_benchmark"] == "tau2-airline"
    verified = ask(openai_client, "marina/verify:openrouter/agent", [TAU2_POLICY, OPENING])
    assert verified.headers["x-marina-lessons"] == "0"
    training = ask(openai_client, "marina/lessons:openrouter/agent", [TAU2_POLICY, OPENING], x_marina_eval="mode=train")
    assert training.headers["x-marina-lessons"] == ids(stored["bags"]), "its own domain only when training"


# --- Verify: a system message after the caller's, shown to the checker --------------------
def test_verify_injects_a_system_message_after_the_callers_and_shows_it_to_the_checker(openai_client, upstream, stored):
    play = Play(upstream, main=text("Let me look up your reservation."), review=json_reply({"verdict": "approve"}))
    raw = ask(openai_client, "marina/verify:openrouter/agent", LATER)
    assert raw.headers["x-marina-verify"] == "approved"
    # Matched against the last user turn: "It is ABC123" shares no word with any lesson.
    assert raw.headers["x-marina-lessons"] == "0"

    play.script(main=text("Let me look up your reservation."), review=json_reply({"verdict": "approve"}))
    raw = ask(openai_client, "marina/verify:openrouter/agent")
    assert raw.headers["x-marina-lessons"] == ids(stored["bags"], stored["cabin"])
    draft = play.bodies["main"][0]["messages"]
    assert draft == [SYSTEM, {"role": "system", "content": block(BAGS, CABIN)}, OPENING]
    assert play.bodies["review"][0]["messages"][0]["content"].startswith(CHECKER_MARKER)
    rules = unframe(play.bodies["review"][0]["messages"][1]["content"])["rules"]
    assert block(BAGS, CABIN) in rules, "the checker sees the lessons among the rules"
    (span,) = lessons_span(raw)
    assert span.detail["query"] == "last-user-turn" and span.parent_seq == 0


def test_verify_in_observe_and_off(openai_client, upstream, stored, settings):
    play = Play(upstream, main=text("Sure."), review=json_reply({"verdict": "approve"}))
    raw = ask(openai_client, "marina/verify:openrouter/agent", x_marina_lessons="observe")
    assert raw.headers["x-marina-lessons"] == "observe:" + ids(stored["bags"], stored["cabin"])
    assert play.bodies["main"][0]["messages"] == [SYSTEM, OPENING]
    settings.MARINA_LESSONS = "off"
    raw = ask(openai_client, "marina/verify:openrouter/agent")
    assert raw.headers["x-marina-lessons"] == "0"
    assert play.bodies["main"][1]["messages"] == [SYSTEM, OPENING]


# --- Stacked with the obligations ledger ---------------------------------------------------
def test_stacked_with_obligations_the_lessons_ride_first_in_the_trailing_note(openai_client, upstream, stored):
    play = Play(upstream, extract=extracted(CANCEL_OBLIGATION), main=text("Shall I?"), judge=json_reply({"o1": "waiting"}))
    raw = openai_client.chat.completions.with_raw_response.create(
        model="marina/lessons:marina/obligations:openrouter/agent", messages=[SYSTEM, OPENING], tools=TOOLS,
        extra_headers={"x-marina-session": "lessons-1"},
    )  # fmt: skip
    assert raw.headers["x-marina-lessons"] == ids(stored["bags"], stored["cabin"])
    assert raw.headers["x-marina-obligations"].startswith("on;")
    last = play.bodies["main"][0]["messages"][-1]["content"]
    assert last.startswith(OPENING["content"] + "\n\n" + block(BAGS, CABIN) + "\n\n" + obligations_prompts.REMINDER_MARKER)
    assert play.bodies["main"][0]["messages"][0] == SYSTEM


# --- The whole loop -----------------------------------------------------------------------
def test_lessons_learned_from_a_failed_run_are_recalled_on_a_related_request(openai_client, upstream, settings):
    JudgePlay(upstream)
    judge = UpstreamJudge("openrouter/judge-model")
    try:
        report = learn(results("airline-oracle"), judge=judge, judge_model="openrouter/judge-model")
    finally:
        judge.close()
    learned = {lesson.rule: lesson for lesson in Lesson.objects.all()}
    assert set(learned) == {CONFIRM, POLICY} and len(report.kept) == 2
    upstream.reset()
    related = [SYSTEM, {"role": "user", "content": "Please add checked bags and change the passenger on my reservation."}]

    raw = ask(openai_client, "marina/lessons:openrouter/agent", related)
    assert set(raw.headers["x-marina-lessons"].split(",")) == {str(lesson.pk) for lesson in learned.values()}
    assert CONFIRM in upstream.requests[-1].body["messages"][-1]["content"]

    settings.MARINA_LESSONS = "observe"
    raw = ask(openai_client, "marina/lessons:openrouter/agent", related)
    assert raw.headers["x-marina-lessons"].startswith("observe:")
    assert upstream.requests[-1].body["messages"] == related

    settings.MARINA_LESSONS = "off"
    raw = ask(openai_client, "marina/lessons:openrouter/agent", related)
    assert raw.headers["x-marina-lessons"] == "0" and upstream.requests[-1].body["messages"] == related

    settings.MARINA_LESSONS = "on"
    raw = ask(openai_client, "marina/lessons:openrouter/agent", related, x_marina_eval="benchmark=tau2-airline; mode=measure")
    assert raw.headers["x-marina-lessons"] == "0" and upstream.requests[-1].body["messages"] == related


# --- Header parsing (pure) ----------------------------------------------------------------
@pytest.mark.parametrize(
    "value, benchmark",
    [
        ("benchmark=tau2-airline; mode=measure", "tau2-airline"),
        ("mode=MEASURE;benchmark=tau2-retail", "tau2-retail"),
        (" benchmark = tau2-airline ;mode= measure ", "tau2-airline"),
        ("benchmark=tau2-airline; mode=live", ""),
        ("benchmark=tau2-airline", ""),
        ("mode=measure", ""),
        ("", ""),
    ],
)
def test_the_measurement_header(value, benchmark):
    assert recall.measured_benchmark({"x-marina-eval": value}) == benchmark


@pytest.mark.parametrize(
    "server, header, default, expected",
    [
        ("on", None, "on", "on"), ("on", None, "off", "off"), ("on", "on", "off", "on"), ("on", "1", "off", "on"),
        ("on", "observe", "on", "observe"), ("on", "false", "on", "off"), ("observe", "on", "on", "observe"),
        ("observe", None, "on", "observe"), ("off", "on", "on", "off"), ("off", "observe", "on", "off"),
    ],
)  # fmt: skip
def test_the_mode_is_the_lower_of_the_servers_and_the_requests(settings, server, header, default, expected):
    settings.MARINA_LESSONS = server
    headers = {} if header is None else {"x-marina-lessons": header}
    assert recall.mode(headers, default=default) == expected


def test_the_response_header_and_the_block():
    assert recall.Recalled("on", [3, 7], ["a", "b"]).header() == "3,7"
    assert recall.Recalled("observe", [3, 7], ["a", "b"]).header() == "observe:3,7"
    assert recall.Recalled("observe", [3], ["a"]).block() == ""
    assert recall.Recalled("on", [], []).header() == recall.OFF.header() == "0"
    assert recall.Recalled("on", [3], ["Rule one."]).block() == "LESSONS (from past outcomes; trusted first):\n- Rule one."
