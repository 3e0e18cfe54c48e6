"""With MARINA_TRACE_BODIES off no message text is stored or exported anywhere:
a verify request whose checker quotes the conversation (`conflict.quote`) and
words a `fix` leaves the words in no table of the database, in no span sent to
a live OTLP receiver and in neither format of `export_traces`; their lengths,
hashes, the decision and the argument name stay."""
from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

from django.db import connection

from kernel.conversation import digest
from ledger.models import Trace
from observability import export
from passthru.formations import state
from passthru.formations.argcheck.values import signature
from passthru.models import ConversationState
from tests.conftest import MARINA_KEY
from tests.observability.test_otel import exporting, received_trace  # noqa: F401  # the fixture, and a helper
from tests.otlp_receiver import OtlpReceiver
from tests.passthru.formations.play import POLICY, Play, calls, extracted, json_reply
from tests.passthru.formations.play import TOOLS as PLAY_TOOLS
from tests.passthru.formations.verify.test_formation import MESSAGES, MODEL, TOOLS, draft_cancel, play, text
from tests.upstream import Reply, ScriptedUpstream, completion, tool_call

PIN = "my card PIN is 4417-9923"
QUOTE = f"I ordered it by mistake, {PIN}"
FIX = f"Do not cancel: the user said {PIN}; ask first."


def database_text() -> str:
    """Every row of every table, as text."""
    dumped = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f'SELECT * FROM "{table}"')  # table names from the database itself
            dumped.append(repr(cursor.fetchall()))
    return "\n".join(dumped)


def test_no_words_of_the_conversation_are_stored_or_exported(marina, upstream, otlp_receiver: OtlpReceiver, exporting, settings):  # noqa: F811
    settings.MARINA_TRACE_BODIES = False
    messages = [dict(m) for m in MESSAGES]
    messages[1] = {**messages[1], "content": f"Please cancel order #W1234567, {QUOTE}."}
    verdict = {"verdict": "revise", "fix": FIX, "conflict": {"quote": QUOTE, "call": "cancel_pending_order", "argument": None}}
    play(
        upstream,
        draft=draft_cancel(),
        checker=Reply(json=completion(json.dumps(verdict), prompt_tokens=300, completion_tokens=40, cost=0.0004)),
        revision=text("Shall I cancel order #W1234567 (yes/no)?"),
    )
    client = marina.openai(MARINA_KEY)
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=messages, tools=TOOLS)
    assert raw.headers["x-marina-verify"] == "revised"
    trace, found = received_trace(otlp_receiver, raw.headers["x-request-id"])

    words = ("4417-9923", "card PIN", "by mistake", "ask first")
    stored = database_text()
    assert not [w for w in words if w in stored], "no message text in the database"
    sent = b"".join(otlp_receiver.raw)
    assert not [w for w in words if w.encode() in sent], "no message text in the OTLP export"
    for fmt in ("jsonl", "otlp-json"):
        out = StringIO()
        export.export_traces(out, since=datetime.now(UTC) - timedelta(hours=1), fmt=fmt)
        assert trace.request_id in out.getvalue()
        assert not [w for w in words if w in out.getvalue()], f"no message text in export_traces --format {fmt}"

    # what stays: the decision, the argument, the lengths and hashes
    review = Trace.objects.get(pk=trace.pk).spans.get(name="review").detail
    assert review == {
        "verdict": "revise",
        "fix_chars": len(FIX),
        "fix_hash": digest([FIX]),
        "conflict": {"quote_chars": len(QUOTE), "quote_hash": digest([QUOTE]), "call": "cancel_pending_order", "argument": None},
    }


def test_with_bodies_on_the_checkers_words_are_kept(marina, upstream, settings):
    settings.MARINA_TRACE_BODIES = True
    verdict = {"verdict": "revise", "fix": FIX, "conflict": {"quote": "obtain explicit user confirmation (yes)", "call": "cancel_pending_order"}}
    play(upstream, draft=draft_cancel(), checker=Reply(json=completion(json.dumps(verdict))), revision=text("Shall I?"))
    client = marina.openai(MARINA_KEY)
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES, tools=TOOLS)
    review = Trace.objects.get(request_id=raw.headers["x-request-id"]).spans.get(name="review").detail
    assert review["fix"] == FIX and review["conflict"]["quote"] == "obtain explicit user confirmation (yes)"


# --- The stacked formations: their state and their spans ---------------------------------------
STACK = "marina/obligations:marina/argcheck:marina/verify:openrouter/agent+openrouter/check"
SECRET = "4417-9921"  # the planted card PIN
ASKED = f"Please cancel order #W1234567, I ordered it by mistake. My card PIN is {SECRET} if you need it."
OWED = {"request": 1, "what": f"cancel order #W1234567 (card PIN {SECRET})", "target": "#W1234567", "tools": ["cancel_pending_order"]}
INVENTED = ("cancel_pending_order", {"order_id": "#W7654321", "reason": f"PIN {SECRET}"})  # an id nobody stated
SEED = 4242


def stacked_conversation(post: Callable[[list[dict[str, Any]]], tuple[dict[str, str], str]], upstream: ScriptedUpstream) -> list[str]:
    """Two turns of one conversation (no session header, a seed: keyed as τ² calls) through
    obligations + argcheck + verify, each turn sent by `post` (messages -> (headers, request id)).
    Asserts the formations worked across the turns; returns the request ids."""
    opening = [{"role": "system", "content": POLICY}, {"role": "user", "content": ASKED}]
    play = Play(
        upstream,
        extract=extracted(OWED),
        main=calls(INVENTED),
        review=json_reply({"verdict": "approve"}),
        argjudge=json_reply({"supported": False, "doubt": "order_id"}),
        retry=calls(INVENTED),
    )
    first, first_id = post(opening)
    assert play.calls == ["extract", "main", "review", "argjudge", "retry", "review"]
    assert first["x-marina-obligations"] == "on;open=1;satisfied=0;declined=0;nudges=0;extract=ok;check=tool-call"
    assert first["x-marina-argcheck"] == "on;writes=1;checked=1;flagged=1;judged=1;nudges=1;check=nudged-kept"

    # Turn 2: the call failed; the agent issues it again. The obligation read in turn 1 rides in
    # the reminder (from the stored state), and the nudged call is known again (a repeat).
    history = [
        *opening,
        {"role": "assistant", "content": None, "tool_calls": [tool_call(*INVENTED, "c0")]},
        {"role": "tool", "tool_call_id": "c0", "content": "Error: order not found"},
    ]
    play.script(main=calls(INVENTED), review=json_reply({"verdict": "approve"}))
    second, second_id = post(history)
    assert play.calls == ["main", "review"], "no new user turn: no extraction; a repeat: no judgement"
    reminder = play.bodies["main"][0]["messages"][-1]["content"]
    assert f"o1: {OWED['what']}" in reminder, "the obligation, in its words, from the stored state"
    assert second["x-marina-obligations"] == "on;open=1;satisfied=0;declined=0;nudges=0;check=tool-call"
    assert second["x-marina-argcheck"] == "on;writes=1;checked=0;flagged=0;judged=0;nudges=1;check=repeat"
    return [first_id, second_id]


def planted() -> list[str]:
    """What must be found nowhere: the PIN, the user's words, the obligation's words, the order
    ids, and argcheck's signature of the nudged call as an unkeyed hash (which a guess confirms)."""
    return [SECRET, "card PIN", "by mistake", "W1234567", "W7654321", signature(*INVENTED)]


def test_formation_state_and_spans_hold_no_words_and_the_formations_still_work(marina, upstream, otlp_receiver: OtlpReceiver, exporting, settings):  # noqa: F811
    settings.MARINA_TRACE_BODIES = False
    client = marina.openai(MARINA_KEY)

    def post(messages: list[dict[str, Any]]) -> tuple[dict[str, str], str]:
        raw = client.chat.completions.with_raw_response.create(model=STACK, messages=messages, tools=PLAY_TOOLS, seed=SEED)
        return dict(raw.headers), raw.headers["x-request-id"]

    ids = stacked_conversation(post, upstream)
    for request_id in ids:
        received_trace(otlp_receiver, request_id)

    words = planted()
    stored = database_text()
    assert not [w for w in words if w in stored], "no message text in the database"
    sent = b"".join(otlp_receiver.raw)
    assert not [w for w in words if w.encode() in sent], "no message text in the OTLP export"
    for fmt in ("jsonl", "otlp-json"):
        out = StringIO()
        export.export_traces(out, since=datetime.now(UTC) - timedelta(hours=1), fmt=fmt)
        assert all(i in out.getvalue() for i in ids)
        assert not [w for w in words if w in out.getvalue()], f"no message text in export_traces --format {fmt}"

    # The state is kept, sealed: the conversation (and the server secret) open it.
    [row] = ConversationState.objects.filter(key__endswith="@3").values_list("state", flat=True)
    assert set(row) == {"sealed"}
    opening = [{"role": "system", "content": POLICY}, {"role": "user", "content": ASKED}]
    kept = state.checkpoint_sync(state.conversation("tester", "", opening, PLAY_TOOLS, SEED, STACK))
    assert kept is not None
    assert kept["obligations"]["items"][0]["what"] == OWED["what"]
    assert kept["argcheck"]["nudged"] == [signature(*INVENTED)]
    # What the spans keep: ids, labels, argument names.
    spans = {s.name: s.detail for s in Trace.objects.get(request_id=ids[0]).spans.all()}
    assert spans["extract"] == {"extract": "ok", "added": ["o1"], "cancelled": []}
    assert spans["argcheck-judge"] == {"call": "cancel_pending_order", "verdict": "unsupported", "doubt": "order_id"}
