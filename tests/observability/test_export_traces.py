"""manage.py export_traces: stored traces as OTLP/JSON (checked by parsing each
line into OpenTelemetry's own ExportTraceServiceRequest) and as flat JSON
lines; the time window; item links; chunked reads; one-line errors."""
from __future__ import annotations

import base64
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ledger.models import BenchmarkItemTrace
from observability import export, spans
from tests.e2e.servers import PROJECT_ROOT, clean_environ
from tests.ledger.builders import make_run
from tests.ledger.report_builders import record_trace
from tests.otlp_receiver import value_of

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def stored(db: None) -> dict[str, Any]:
    """Four traces: one before the window, a plain call and a formation in it, one after it."""
    early = record_trace(request_id="req-early", model="openrouter/a", started_at=T0 - timedelta(days=1))
    plain = record_trace(request_id="req-plain", model="openrouter/a", started_at=T0 + timedelta(hours=1))
    formation = record_trace(
        request_id="req-verify",
        model="marina/verify:openrouter/a",
        started_at=T0 + timedelta(hours=2),
        formation_label="revised",
        calls=[("openrouter/a", 1_000_000), ("openrouter/b", 400_000), ("openrouter/a", None)],
    )
    late = record_trace(request_id="req-late", model="openrouter/a", started_at=T0 + timedelta(days=2))
    run = make_run({"t1#0": 1.0})
    BenchmarkItemTrace.objects.create(item=run.items.get(), trace=plain, role="agent")
    return {"early": early, "plain": plain, "formation": formation, "late": late, "run": run}


def as_protobuf_json(line: str) -> str:
    """OTLP/JSON writes ids in hex where protobuf's JSON mapping wants base64."""
    request = json.loads(line)
    for resource in request["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return json.dumps(request)


def test_otlp_json_is_one_export_request_per_trace_with_the_live_ids(stored, tmp_path: Path):
    out = tmp_path / "traces.otlp.jsonl"
    err = StringIO()
    call_command("export_traces", "--since", "2026-11-02", "--until", "2026-11-03", "--out", str(out), stderr=err)
    assert err.getvalue().strip() == f"Exported 2 traces (7 spans) to {out}."
    lines = out.read_text().splitlines()
    assert len(lines) == 2
    requests = [json_format.Parse(as_protobuf_json(line), ExportTraceServiceRequest()) for line in lines]

    for request, trace in zip(requests, (stored["plain"], stored["formation"])):
        [resource] = request.resource_spans
        assert {a.key: value_of(a.value) for a in resource.resource.attributes} == {"service.name": "marina"}
        [scope] = resource.scope_spans
        got = list(scope.spans)
        trace_id, root_id, seed = spans.trace_ids(trace.request_id, trace.started_at)
        assert {s.trace_id.hex() for s in got} == {f"{trace_id:032x}"}
        root = got[0]
        assert (root.span_id.hex(), root.parent_span_id, root.kind) == (f"{root_id:016x}", b"", 2)
        assert root.start_time_unix_nano == spans.unix_ns(trace.started_at)
        for span, step in zip(got[1:], trace.spans.order_by("seq")):
            assert span.span_id.hex() == f"{spans.step_span_id(seed, step.seq):016x}"
            parent = root_id if step.parent_seq is None else spans.step_span_id(seed, step.parent_seq)
            assert span.parent_span_id.hex() == f"{parent:016x}"

    plain_root = {a.key: value_of(a.value) for a in requests[0].resource_spans[0].scope_spans[0].spans[0].attributes}
    assert plain_root["marina.request_id"] == "req-plain" and plain_root["marina.key_name"] == "tester"
    assert plain_root["marina.benchmark.run_id"] == [stored["run"].id]
    assert plain_root["marina.benchmark.item_id"] == ["t1#0"] and plain_root["marina.benchmark.role"] == ["agent"]
    calls = requests[1].resource_spans[0].scope_spans[0].spans
    review = {a.key: value_of(a.value) for a in calls[3].attributes}
    assert review["marina.step"] == "review" and review["marina.detail.verdict"] == "revise"
    assert review["gen_ai.usage.input_tokens"] == 1000 and review["marina.cost_usd"] == pytest.approx(0.0004)
    unpriced = {a.key: value_of(a.value) for a in calls[4].attributes}
    assert "marina.cost_usd" not in unpriced and unpriced["marina.cost_source"] == "none"


def test_jsonl_is_one_flat_span_per_line(stored):
    out = StringIO()
    call_command("export_traces", "--since", "2026-11-02T09:30:00", "--format", "jsonl", stdout=out, stderr=StringIO())
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    # Up to now: the plain call, the formation and the late trace.
    assert [r["attributes"]["marina.request_id"] for r in rows if r["parent_span_id"] is None] == ["req-plain", "req-verify", "req-late"]
    assert len(rows) == 2 + 5 + 2
    ids = {r["span_id"] for r in rows}
    assert all(r["parent_span_id"] in ids for r in rows if r["parent_span_id"] is not None)
    formation = [r for r in rows if r["trace_id"] == rows[2]["trace_id"]]
    assert [r["kind"] for r in formation] == ["server", "internal", "client", "client", "client"]
    root = formation[0]
    assert root["start_time"] == (T0 + timedelta(hours=2)).isoformat()
    assert root["duration_ms"] == pytest.approx(stored["formation"].duration_ms)
    assert root["attributes"]["marina.formation.decision"] == "revised"
    assert root["attributes"]["marina.cost_usd"] == pytest.approx(0.0014)


def test_failed_traces_carry_the_error_status(db):
    record_trace(request_id="req-failed", model="openrouter/a", started_at=T0, status="error")
    out = StringIO()
    call_command("export_traces", "--since", "2026-11-01", "--format", "jsonl", stdout=out, stderr=StringIO())
    root, call = (json.loads(line) for line in out.getvalue().splitlines())
    assert (root["status"], root["status_message"], root["attributes"]["error.type"]) == ("error", "upstream_error", "upstream_error")
    assert (call["status"], call["attributes"]["http.response.status_code"]) == ("error", 502)
    assert "gen_ai.response.model" not in call["attributes"], "no answer, no response model"


def test_traces_are_read_in_chunks_not_one_query_each(stored, monkeypatch):
    monkeypatch.setattr(export, "CHUNK", 2)
    with CaptureQueriesContext(connection) as queries:
        done = export.export_traces(StringIO(), since=T0 - timedelta(days=5))
    assert done.traces == 4
    # The traces, then per chunk of 2 one query for their spans and one for their links:
    # 1 + 2 * 2 = 5 (one chunk of 500 would be 3; a query per trace 1 + 2 * 4 = 9).
    assert len(queries) == 5, [q["sql"][:80] for q in queries]


def test_bodies_are_exported_only_with_trace_bodies_on(db, settings):
    trace = record_trace(request_id="req-body", model="openrouter/a", started_at=T0)
    call = trace.spans.get()
    call.body = {
        "request": {"model": "a", "messages": [{"role": "user", "content": "hello [redacted]"}]},
        "response": {"id": "chatcmpl-1", "model": "a-2026", "choices": [
            {"message": {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_order", "arguments": "{}"}}]},
             "finish_reason": "tool_calls"}]},
    }  # fmt: skip
    call.save(update_fields=["body"])
    settings.MARINA_TRACE_BODIES = False
    out = StringIO()
    export.export_traces(out, since=T0, fmt="jsonl")
    assert "gen_ai.input.messages" not in out.getvalue() and "hello" not in out.getvalue()
    settings.MARINA_TRACE_BODIES = True
    out = StringIO()
    export.export_traces(out, since=T0, fmt="jsonl")
    attributes = json.loads(out.getvalue().splitlines()[1])["attributes"]
    assert json.loads(attributes["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "hello [redacted]"}]}
    ]
    assert json.loads(attributes["gen_ai.output.messages"]) == [
        {"role": "assistant", "finish_reason": "tool_calls",
         "parts": [{"type": "tool_call", "id": "c1", "name": "get_order", "arguments": "{}"}]}
    ]  # fmt: skip
    assert (attributes["gen_ai.response.model"], attributes["gen_ai.response.id"]) == ("a-2026", "chatcmpl-1")


BAD_ARGUMENTS = [
    (["--since", "yesterday"], "--since: 'yesterday' is not a date (YYYY-MM-DD) or an ISO date-time"),
    ([], "--since is required: YYYY-MM-DD or an ISO date-time"),
    (["--since", "2026-11-02", "--until", "2026-11-01"], "--until 2026-11-01 is not after --since 2026-11-02"),
    (["--since", "2026-11-02", "--format", "csv"], "--format must be otlp-json or jsonl, not 'csv'"),
]


@pytest.mark.parametrize("args, message", BAD_ARGUMENTS)
def test_bad_arguments_are_one_line_errors(args: list[str], message: str):
    out = StringIO()
    with pytest.raises(CommandError) as refused:
        call_command("export_traces", *args, stdout=out, stderr=StringIO())
    assert str(refused.value) == message
    assert out.getvalue() == ""


def test_through_manage_py_a_bad_argument_is_one_line_on_stderr_and_a_failing_exit(tmp_path: Path):
    """The process itself (the cases above run in this one): Django's CommandError as one line, no traceback."""
    args, message = BAD_ARGUMENTS[3]
    done = subprocess.run(
        [sys.executable, "manage.py", "export_traces", *args],
        cwd=PROJECT_ROOT,
        env=clean_environ({"DATABASE_URL": f"sqlite:///{tmp_path / 'none.sqlite3'}"}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [f"CommandError: {message}"]
    assert done.stdout == ""


def test_an_unwritable_out_file_is_one_error_and_leaves_nothing(stored, tmp_path: Path):
    target = tmp_path / "missing-folder" / "traces.jsonl"
    with pytest.raises(CommandError, match=r"^--out .*traces.jsonl: No such file or directory$"):
        call_command("export_traces", "--since", "2026-11-01", "--out", str(target), stderr=StringIO())
    assert not target.parent.exists()


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path: Path):
    """`export_traces ... | head -1`: the pipe closes mid-export; the command stops quietly."""
    env = clean_environ({"DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}"})
    # The demo's day of traffic (over a thousand traces) in a database of its own, one interpreter
    # for both commands: only the export below is the process under test.
    prepare = "import django; django.setup(); from django.core.management import call_command as c; c('migrate', verbosity=0); c('demo')"
    subprocess.run([sys.executable, "-c", prepare], cwd=PROJECT_ROOT, env={**env, "DJANGO_SETTINGS_MODULE": "marina.settings"}, check=True, capture_output=True, timeout=300)  # fmt: skip
    export = subprocess.Popen(
        [sys.executable, "manage.py", "export_traces", "--since", "2000-01-01", "--format", "jsonl"],
        cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert export.stdout is not None and export.stderr is not None
    first = export.stdout.readline()
    export.stdout.close()  # as `head -1` does
    stderr = export.stderr.read().decode()
    export.wait(timeout=120)
    assert json.loads(first)["trace_id"]
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert export.returncode == 1
