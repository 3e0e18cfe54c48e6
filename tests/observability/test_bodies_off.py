"""With MARINA_TRACE_BODIES off no message text is stored or exported anywhere:
a verify request whose checker quotes the conversation (`conflict.quote`) and
words a `fix` leaves the words in no table of the database, in no span sent to
a live OTLP receiver and in neither format of `export_traces`; their lengths,
hashes, the decision and the argument name stay."""
from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO

import openai
from django.db import connection

from kernel.conversation import digest
from ledger.models import Trace
from observability import export
from tests.conftest import MARINA_KEY
from tests.observability.test_otel import exporting, received_trace  # noqa: F401  # the fixture, and a helper
from tests.otlp_receiver import OtlpReceiver
from tests.passthru.test_formation_verify import MESSAGES, MODEL, TOOLS, draft_cancel, play, text
from tests.upstream import Reply, completion

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


def test_no_words_of_the_conversation_are_stored_or_exported(marina_url, upstream, otlp_receiver: OtlpReceiver, exporting, settings):  # noqa: F811
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
    client = openai.OpenAI(base_url=f"{marina_url}/v1", api_key=MARINA_KEY, max_retries=0)
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


def test_with_bodies_on_the_checkers_words_are_kept(marina_url, upstream, settings):
    settings.MARINA_TRACE_BODIES = True
    verdict = {"verdict": "revise", "fix": FIX, "conflict": {"quote": "obtain explicit user confirmation (yes)", "call": "cancel_pending_order"}}
    play(upstream, draft=draft_cancel(), checker=Reply(json=completion(json.dumps(verdict))), revision=text("Shall I?"))
    client = openai.OpenAI(base_url=f"{marina_url}/v1", api_key=MARINA_KEY, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES, tools=TOOLS)
    review = Trace.objects.get(request_id=raw.headers["x-request-id"]).spans.get(name="review").detail
    assert review["fix"] == FIX and review["conflict"]["quote"] == "obtain explicit user confirmation (yes)"
