"""MARINA_TRACE_STORE (marina/settings.py, ledger/spend/trace_writer.py): its
validation at start-up, in a fresh interpreter each (`manage.py check` and
gunicorn, as an operator starts them), and what the writer keeps in the
database with `otel`: the trace row without its body, spend exact, and of the
spans only the formation decisions the benchmark links read."""
from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from django.db.models import Sum

from kernel.env import ConfigError, env_choice
from kernel.formations import holds_decision
from ledger.benchmarks.decisions import of_trace
from ledger.benchmarks.links import _decision_spans
from ledger.models import Span, SpendDaily, Trace
from ledger.spend import services
from ledger.spend.records import SpanRecord, TraceRecord
from tests.e2e.servers import PROJECT_ROOT, clean_environ, free_port

ENDPOINT = "http://127.0.0.1:4318"
NEEDS_EXPORT = (
    "needs the OTLP export: set OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) to the "
    "collector's http(s) URL, with neither OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none, or set MARINA_TRACE_STORE=db"
)


# --- The setting ---------------------------------------------------------------------
def test_env_choice_takes_a_listed_value_in_any_case_and_blank_as_the_default(monkeypatch):
    for raw, expected in (("otel", "otel"), (" BOTH ", "both"), ("", "db")):
        monkeypatch.setenv("MARINA_TRACE_STORE", raw)
        assert env_choice("MARINA_TRACE_STORE", ("db", "otel", "both"), "db") == expected
    monkeypatch.delenv("MARINA_TRACE_STORE")
    assert env_choice("MARINA_TRACE_STORE", ("db", "otel", "both"), "db") == "db"
    monkeypatch.setenv("MARINA_TRACE_STORE", "spans")
    with pytest.raises(ConfigError, match=r"^MARINA_TRACE_STORE must be db, otel or both, not 'spans'$"):
        env_choice("MARINA_TRACE_STORE", ("db", "otel", "both"), "db")


def check(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); from django.conf import settings; print(settings.MARINA_TRACE_STORE)"],
        cwd=PROJECT_ROOT, env=clean_environ({"DJANGO_SETTINGS_MODULE": "marina.settings", **env}),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize(
    "env, store",
    [
        ({}, "db"),
        ({"MARINA_TRACE_STORE": "db"}, "db"),
        ({"MARINA_TRACE_STORE": "otel", "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, "otel"),
        ({"MARINA_TRACE_STORE": "Both", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{ENDPOINT}/v1/traces"}, "both"),
    ],
)
def test_a_valid_trace_store_starts(env: dict[str, str], store: str):
    done = check(env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == store


@pytest.mark.parametrize(
    "env, message",
    [
        ({"MARINA_TRACE_STORE": "otel"}, f"MARINA_TRACE_STORE=otel {NEEDS_EXPORT}"),
        ({"MARINA_TRACE_STORE": "both"}, f"MARINA_TRACE_STORE=both {NEEDS_EXPORT}"),
        ({"MARINA_TRACE_STORE": "otel", "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "true"},
         f"MARINA_TRACE_STORE=otel {NEEDS_EXPORT}"),
        ({"MARINA_TRACE_STORE": "otel", "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_EXPORTER": "none"},
         f"MARINA_TRACE_STORE=otel {NEEDS_EXPORT}"),
        ({"MARINA_TRACE_STORE": "collector", "OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT},
         "MARINA_TRACE_STORE must be db, otel or both, not 'collector'"),
    ],
)  # fmt: skip
def test_a_trace_store_without_its_export_stops_manage_py_in_one_line(env: dict[str, str], message: str):
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=PROJECT_ROOT, env=clean_environ(env), capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [f"Marina's configuration: {message}"]


def test_gunicorn_refuses_otel_without_an_endpoint_in_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "marina.asgi:application"],
        cwd=PROJECT_ROOT,
        env=clean_environ({
            "MARINA_TRACE_STORE": "otel", "MARINA_BIND": f"127.0.0.1:{free_port()}", "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
        }),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if "[INFO]" not in line and line.strip()]  # gunicorn's own first
    assert lines == [f"Error: Marina's configuration: MARINA_TRACE_STORE=otel {NEEDS_EXPORT}"], done.stderr


# --- What the writer keeps with otel ------------------------------------------------------
T0 = datetime(2026, 5, 6, 12, 0, 0, tzinfo=UTC)


def _stacked(request_id: str) -> TraceRecord:
    """A stacked formation's call: the stack's span (its headers in detail), a
    verify run with its label, and two upstream calls, bodies traced."""
    body = {"request": {"messages": [{"role": "user", "content": "hi"}]}}
    spans = [
        SpanRecord(seq=0, name="stack", started_at=T0, detail={
            "obligations": "on;open=1;satisfied=2;declined=0;nudges=0;extract=ok;check=handled",
            "argcheck": "on;writes=1;checked=3;flagged=1;judged=1;nudges=0;check=no-write",
        }),
        SpanRecord(seq=1, parent_seq=0, name="verify", started_at=T0, detail={"label": "approved"}),
        SpanRecord(seq=2, parent_seq=1, name="draft", started_at=T0, provider="openrouter", upstream_model="m",
                   http_status=200, prompt_tokens=10, completion_tokens=2, cost_nanousd=1_234_560, body=body),
        SpanRecord(seq=3, parent_seq=1, name="review", started_at=T0 + timedelta(seconds=1), provider="openrouter",
                   upstream_model="m", http_status=200, prompt_tokens=7, completion_tokens=1, cost_nanousd=70, body=body),
    ]  # fmt: skip
    return TraceRecord(
        request_id=request_id, started_at=T0, path="/v1/chat/completions", key_name="tester", requested_model="openrouter/m",
        route="obligations+argcheck+verify", formation_label="obligations=handled;argcheck=no-write;verify=approved",
        body={"model": "openrouter/m"}, spans=spans, conv_seed=7, conv_opening="abc", conv_system="def",
    )  # fmt: skip


def _plain(request_id: str) -> TraceRecord:
    span = SpanRecord(seq=0, name="upstream", started_at=T0, provider="openrouter", upstream_model="m", http_status=200,
                      prompt_tokens=5, completion_tokens=1, cost_nanousd=990, body={"request": {}})  # fmt: skip
    return TraceRecord(request_id=request_id, started_at=T0, path="/v1/chat/completions", requested_model="openrouter/m",
                       route="passthru", body={"model": "openrouter/m"}, spans=[span], conv_seed=8)  # fmt: skip


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("batch", [False, True])
def test_otel_keeps_the_trace_row_spend_and_the_decision_spans_only(settings, batch: bool):
    settings.MARINA_TRACE_STORE = "otel"
    settings.MARINA_TRACE_BODIES = True
    records = [_stacked("req-stack"), _plain("req-plain")]
    if batch:
        services.record_requests(records)  # one transaction (on PostgreSQL: a pipeline)
    else:
        for record in records:
            services.record_requests([record])  # alone (on PostgreSQL: one statement)
    stacked, plain = Trace.objects.get(request_id="req-stack"), Trace.objects.get(request_id="req-plain")
    assert stacked.body is None and plain.body is None
    assert (stacked.cost_nanousd, stacked.prompt_tokens, stacked.completion_tokens) == (1_234_630, 17, 3)
    assert (stacked.conv_seed, stacked.conv_opening, stacked.conv_system) == (7, "abc", "def")
    assert not plain.spans.exists()
    kept = list(stacked.spans.order_by("seq").values_list("seq", "name", "body"))
    assert kept == [(0, "stack", None), (1, "verify", None)]
    spend = SpendDaily.objects.aggregate(calls=Sum("calls"), cost=Sum("cost_nanousd"), prompt=Sum("prompt_tokens"))
    assert spend == {"calls": 3, "cost": 1_234_630 + 990, "prompt": 22}
    # The links read the same decisions as from a full trace.
    full = of_trace(stacked.route, stacked.formation_label, [(s.name, s.detail) for s in _stacked("x").spans])
    from_db = of_trace(stacked.route, stacked.formation_label, _decision_spans([stacked.pk])[stacked.pk])
    assert from_db == full and from_db.headers["obligations"]["satisfied"] == "2"


@pytest.mark.django_db(transaction=True)
def test_db_and_both_keep_every_span_and_the_bodies(settings):
    settings.MARINA_TRACE_BODIES = True
    for store in ("db", "both"):
        settings.MARINA_TRACE_STORE = store
        services.record_requests([_stacked(f"req-{store}")])
        trace = Trace.objects.get(request_id=f"req-{store}")
        assert trace.body == {"model": "openrouter/m"}
        assert list(trace.spans.order_by("seq").values_list("name", flat=True)) == ["stack", "verify", "draft", "review"]
    assert Span.objects.exclude(body=None).count() == 4


def test_holds_decision_is_the_links_query():
    assert holds_decision("verify", {}) and holds_decision("stack", {"obligations": "on"})
    assert holds_decision("stack", {"argcheck": "on"})
    assert not holds_decision("upstream", {"step": "draft"}) and not holds_decision("stack", {"state": "x"})
