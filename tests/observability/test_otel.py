"""OpenTelemetry export in one process: requests through Marina (in-process) reach
a real OTLP/HTTP otlp_receiver on loopback (tests/otlp_receiver.py decodes them
with OpenTelemetry's protobuf messages) with the right ids, parents and
attributes; a stuck or absent collector costs the calls nothing; and without
an endpoint nothing of OpenTelemetry is loaded. The same through a real
gunicorn is tests/e2e/test_otel_export.py."""
from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from ledger.models import Trace
from ledger.spend import services
from observability import otel, spans
from tests.conftest import MARINA_KEY, PROVIDER_KEY
from tests.e2e.servers import PROJECT_ROOT, clean_environ, free_port
from tests.otlp_receiver import OtlpReceiver, ReceivedSpan, wait_for
from tests.passthru.formations.verify.test_formation import (
    CONFIRM_TEXT,
    MESSAGES,
    MODEL,
    TOOLS,
    draft_cancel,
    play,
    revise,
    text,
)
from tests.scripted_providers import keyed
from tests.upstream import Reply, completion

PLAIN = "openrouter/openai/gpt-5.2"



def start_exporter(monkeypatch: pytest.MonkeyPatch, endpoint: str, **env: str) -> otel.Exporter:
    """otel.start() as observability/apps.py calls it, configured by the SDK's variables."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "20")  # milliseconds; the default 5 s would only slow the test
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    exporter = otel.start()
    services.add_observer(exporter)
    return exporter


@pytest.fixture
def exporting(otlp_receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> Iterator[otel.Exporter]:
    exporter = start_exporter(monkeypatch, otlp_receiver.base_url)
    yield exporter
    services.remove_observer(exporter)
    otlp_receiver.release()
    exporter.shutdown()


def received_trace(otlp_receiver: OtlpReceiver, request_id: str) -> tuple[Trace, list[ReceivedSpan]]:
    """The stored trace and its exported spans, once all of them have arrived."""
    otlp_receiver.wait_for(lambda: Trace.objects.filter(request_id=request_id).exists(), "the trace to be committed")
    trace = Trace.objects.get(request_id=request_id)
    trace_id = f"{spans.trace_ids(request_id, trace.started_at)[0]:032x}"
    expected = 1 + trace.spans.count()
    otlp_receiver.wait_for(lambda: len(otlp_receiver.of_trace(trace_id)) >= expected, f"{expected} spans of {request_id}")
    found = otlp_receiver.of_trace(trace_id)
    assert len(found) == expected, "each span exported once"
    return trace, found


def test_a_call_becomes_a_server_span_with_its_upstream_call_as_child(openai_client, upstream, otlp_receiver, exporting):
    upstream.script(Reply(json=completion("hi", prompt_tokens=30, completion_tokens=7, cost=0.00125)))
    raw = openai_client.chat.completions.with_raw_response.create(model=PLAIN, messages=[{"role": "user", "content": "x"}])
    request_id = raw.headers["x-request-id"]
    trace, found = received_trace(otlp_receiver, request_id)
    [root] = [s for s in found if not s.parent_span_id]
    [call] = [s for s in found if s.parent_span_id]

    trace_id, root_id, seed = spans.trace_ids(request_id, trace.started_at)
    assert (root.trace_id, root.span_id) == (f"{trace_id:032x}", f"{root_id:016x}")
    assert call.parent_span_id == root.span_id and call.span_id == f"{spans.step_span_id(seed, trace.spans.get().seq):016x}"
    assert (root.name, root.kind, call.name, call.kind) == ("POST /v1/chat/completions", 2, "chat openai/gpt-5.2", 3)
    assert root.start_ns == spans.unix_ns(trace.started_at)
    assert root.end_ns - root.start_ns == pytest.approx(trace.duration_ms * 1e6, abs=1)
    assert root.start_ns <= call.start_ns <= call.end_ns <= root.end_ns
    assert root.resource["service.name"] == "marina" and root.scope == "marina"
    assert (root.status_code, call.status_code) == (0, 0)

    # The request is a server span, not a model call: one LLM span per call for Phoenix & co.
    assert not any(k.startswith(("gen_ai.operation", "gen_ai.request", "gen_ai.response", "llm.")) for k in root.attributes)
    assert root.attributes["openinference.span.kind"] == "CHAIN"
    assert root.attributes["marina.request.model"] == PLAIN
    assert root.attributes["marina.response.model"] == "openai/gpt-5.2"
    assert root.attributes["marina.request_id"] == request_id
    assert root.attributes["marina.key_name"] == "tester"
    assert root.attributes["marina.route"] == "passthru"
    assert root.attributes["marina.cost_usd"] == pytest.approx(0.00125)
    assert root.attributes["http.response.status_code"] == 200
    assert "gen_ai.usage.input_tokens" not in root.attributes, "tokens are counted on the calls only"
    assert call.attributes["gen_ai.operation.name"] == "chat"
    assert call.attributes["gen_ai.provider.name"] == call.attributes["gen_ai.system"] == "openrouter"
    assert call.attributes["gen_ai.request.model"] == "openai/gpt-5.2"
    assert (call.attributes["gen_ai.usage.input_tokens"], call.attributes["gen_ai.usage.output_tokens"]) == (30, 7)
    assert call.attributes["marina.cost_usd"] == pytest.approx(0.00125)
    assert call.attributes["marina.cost_source"] == trace.spans.get().cost_source
    # OpenInference's attributes beside the GenAI ones: Marina's billed cost among the span's attributes in Phoenix/Langfuse.
    assert call.attributes["openinference.span.kind"] == "LLM"
    assert (call.attributes["llm.model_name"], call.attributes["llm.provider"]) == ("openai/gpt-5.2", "openrouter")
    assert "llm.system" not in call.attributes, "OpenInference has no llm.system value for OpenRouter"
    assert (call.attributes["llm.token_count.prompt"], call.attributes["llm.token_count.completion"]) == (30, 7)
    assert call.attributes["llm.token_count.total"] == 37
    assert call.attributes["llm.cost.total"] == pytest.approx(0.00125)
    assert "llm.cost.total" not in root.attributes, "cost counted once, on the call"
    assert not any(k.startswith("gen_ai.input") or k.startswith("gen_ai.output") for s in found for k in s.attributes), (
        "no message content without MARINA_TRACE_BODIES"
    )
    assert not any(secret.encode() in body for body in otlp_receiver.raw for secret in (MARINA_KEY, PROVIDER_KEY))


def test_each_door_names_its_request_span_and_embeddings_are_embedding_spans(
    marina, upstream, marina_config, otlp_receiver, exporting
):
    """/v1/responses, /v1/embeddings and /v1/messages were `POST` (the name of a refused request on no
    door), and an embeddings call an LLM span named `chat <model>`."""
    keyed(marina_config, upstream, "openai", "anthropic")
    auth = {"Authorization": f"Bearer {MARINA_KEY}"}
    calls = {
        "/v1/responses": ("openai/gpt-4o-mini", {"input": "x"}, "chat gpt-4o-mini"),
        "/v1/embeddings": ("openai/text-embedding-3-small", {"input": ["x", "y"]}, "embeddings text-embedding-3-small"),
        "/v1/messages": ("anthropic/claude-sonnet-4-5", {"max_tokens": 8, "messages": [{"role": "user", "content": "x"}]},
                         "chat claude-sonnet-4-5"),
    }  # fmt: skip
    for path, (model, body, call_name) in calls.items():
        answer = marina.http.post(path, json={"model": model, **body}, headers=auth)
        assert answer.status_code == 200, answer.text
        _, found = received_trace(otlp_receiver, answer.headers["x-request-id"])
        [root] = [s for s in found if not s.parent_span_id]
        [call] = [s for s in found if s.parent_span_id]
        assert (root.name, root.kind, root.attributes["openinference.span.kind"]) == (f"POST {path}", 2, "CHAIN")
        assert call.name == call_name
        if path == "/v1/embeddings":
            assert call.attributes["gen_ai.operation.name"] == "embeddings"
            assert call.attributes["openinference.span.kind"] == "EMBEDDING"
            assert call.attributes["embedding.model_name"] == "text-embedding-3-small"
            assert (call.attributes["gen_ai.usage.input_tokens"], call.attributes["llm.token_count.prompt"]) == (8, 8)
        else:
            assert (call.attributes["gen_ai.operation.name"], call.attributes["openinference.span.kind"]) == ("chat", "LLM")
    refused = marina.http.post("/v1/no-such-door", json={}, headers=auth)
    _, [root] = received_trace(otlp_receiver, refused.headers["x-request-id"])
    assert root.name == "POST"


def test_a_formation_exports_its_steps_under_their_parents(openai_client, upstream, otlp_receiver, exporting):
    play(upstream, draft=draft_cancel(), checker=revise(), revision=text(CONFIRM_TEXT))
    raw = openai_client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES, tools=TOOLS)
    request_id = raw.headers["x-request-id"]
    trace, found = received_trace(otlp_receiver, request_id)
    _, root_id, seed = spans.trace_ids(request_id, trace.started_at)
    by_id = {s.span_id: s for s in found}
    stored = list(trace.spans.order_by("seq"))
    assert any(s.parent_seq is not None for s in stored), "the formation nests its calls"
    for step in stored:
        got = by_id[f"{spans.step_span_id(seed, step.seq):016x}"]
        parent = root_id if step.parent_seq is None else spans.step_span_id(seed, step.parent_seq)
        assert got.parent_span_id == f"{parent:016x}", step.name
        assert got.attributes["marina.step"] == step.name
        # A formation's calls are named by formation and step (draft and review used to share `chat <model>`).
        assert got.name == (f"verify.{step.name}" if step.provider else step.name)
        assert got.kind == (3 if step.provider else 1)
        kind = "LLM" if step.provider else "RETRIEVER" if step.name == "lessons" else "CHAIN"
        assert got.attributes["openinference.span.kind"] == kind
        assert ("gen_ai.operation.name" in got.attributes) == bool(step.provider), "only model calls are model calls"
    names = [by_id[f"{spans.step_span_id(seed, step.seq):016x}"].name for step in stored]
    assert names == ["verify", "lessons", "verify.draft", "verify.review", "verify.revision"]
    [root] = [s for s in found if s.span_id == f"{root_id:016x}"]
    assert root.attributes["marina.formation.name"] == "verify"
    assert root.attributes["marina.formation.decision"] == trace.formation_label == "revised"
    review = next(s for s in found if s.attributes.get("marina.step") == "review")
    assert review.attributes["marina.detail.verdict"] == "revise"
    verify = next(s for s in found if s.attributes.get("marina.step") == "verify")
    assert json.loads(verify.attributes["marina.detail.conflict"])["call"] == "cancel_pending_order"
    assert sum(s.attributes.get("gen_ai.usage.input_tokens", 0) for s in found) == trace.prompt_tokens == 750


def test_message_content_only_with_trace_bodies_and_redacted(openai_client, upstream, otlp_receiver, exporting, settings):
    settings.MARINA_TRACE_BODIES = True
    leaked = "sk-abcdefghijklmnopqrstuvwx"
    upstream.script(Reply(json=completion("Noted.", prompt_tokens=5, completion_tokens=2)))
    raw = openai_client.chat.completions.with_raw_response.create(
        model=PLAIN, messages=[{"role": "user", "content": f"my other key is {leaked}, remember it"}]
    )
    _, found = received_trace(otlp_receiver, raw.headers["x-request-id"])
    call = next(s for s in found if s.parent_span_id)
    sent = json.loads(call.attributes["gen_ai.input.messages"])
    assert sent == [{"role": "user", "parts": [{"type": "text", "content": "my other key is [redacted], remember it"}]}]
    answered = json.loads(call.attributes["gen_ai.output.messages"])
    assert answered[0]["role"] == "assistant" and answered[0]["parts"][0]["content"] == "Noted."
    root = next(s for s in found if not s.parent_span_id)
    assert "gen_ai.input.messages" not in root.attributes, "content once, on the call"
    assert not any(leaked.encode() in body for body in otlp_receiver.raw)


def test_a_stuck_collector_neither_holds_up_nor_fails_calls(openai_client, upstream, otlp_receiver, monkeypatch):
    otlp_receiver.hang()  # accepts exports and never answers them
    exporter = start_exporter(monkeypatch, otlp_receiver.base_url, OTEL_EXPORTER_OTLP_TIMEOUT="120")
    try:
        first = openai_client.chat.completions.with_raw_response.create(model=PLAIN, messages=[{"role": "user", "content": "x"}])
        otlp_receiver.wait_for(lambda: otlp_receiver.hanging == 1, "the exporter to be stuck on the collector")
        ids = [first.headers["x-request-id"]]
        for n in range(20):
            raw = openai_client.chat.completions.with_raw_response.create(model=PLAIN, messages=[{"role": "user", "content": str(n)}])
            assert raw.http_response.status_code == 200
            ids.append(raw.headers["x-request-id"])
        # Every call was answered and committed while the export was still stuck.
        assert otlp_receiver.hanging == 1 and otlp_receiver.spans == []
        otlp_receiver.wait_for(lambda: Trace.objects.filter(request_id__in=ids).count() == 21, "21 committed traces")
        otlp_receiver.release()
        # The queue held them: once the collector answers, every trace arrives.
        otlp_receiver.wait_for(lambda: {s.attributes.get("marina.request_id") for s in otlp_receiver.spans} >= set(ids), "every trace")
    finally:
        services.remove_observer(exporter)
        otlp_receiver.release()
        exporter.shutdown()


def test_a_full_export_queue_drops_spans_not_calls(openai_client, upstream, otlp_receiver, monkeypatch, caplog):
    otlp_receiver.hang()
    exporter = start_exporter(
        monkeypatch, otlp_receiver.base_url, OTEL_BSP_MAX_QUEUE_SIZE="4", OTEL_BSP_MAX_EXPORT_BATCH_SIZE="2", OTEL_EXPORTER_OTLP_TIMEOUT="120"
    )
    try:
        ids = []
        for n in range(12):
            raw = openai_client.chat.completions.with_raw_response.create(model=PLAIN, messages=[{"role": "user", "content": str(n)}])
            ids.append(raw.headers["x-request-id"])
        otlp_receiver.wait_for(lambda: Trace.objects.filter(request_id__in=ids).count() == 12, "12 committed traces")
        otlp_receiver.release()
        otlp_receiver.wait_for(lambda: otlp_receiver.requests >= 2 and otlp_receiver.hanging == 0, "the queue to drain")
        exporter.processor.force_flush()
        exported = {s.attributes.get("marina.request_id") for s in otlp_receiver.spans} - {None}
        assert 0 < len(exported) < 12, "the SDK dropped what its queue could not hold"
        # Dozens of spans dropped, but the warning is not repeated for each (the SDK's filter).
        assert 1 <= sum("Queue full" in r.getMessage() for r in caplog.records) <= 2
    finally:
        services.remove_observer(exporter)
        otlp_receiver.release()
        exporter.shutdown()


def test_no_collector_at_all_costs_no_call_and_no_row(openai_client, upstream, monkeypatch):
    # Nothing listens there. The short timeout only shortens the test's end: the
    # exporter keeps retrying a batch (in its own thread) until then.
    exporter = start_exporter(monkeypatch, f"http://127.0.0.1:{free_port()}", OTEL_EXPORTER_OTLP_TIMEOUT="1")
    try:
        ids = [
            openai_client.chat.completions.with_raw_response.create(model=PLAIN, messages=[{"role": "user", "content": str(n)}]).headers[
                "x-request-id"
            ]
            for n in range(10)
        ]
        wait_for(lambda: Trace.objects.filter(request_id__in=ids).count() == 10, "10 committed traces")
    finally:
        services.remove_observer(exporter)
        exporter.shutdown()


# --- Loaded only when configured (a fresh interpreter each: this one has loaded it) ---
PROBE = (
    "import sys, django; django.setup(); "
    "from datetime import datetime, UTC; "
    "from ledger.spend import services; from ledger.spend.records import TraceRecord; "
    "services.notify_committed([TraceRecord(request_id='req-probe', started_at=datetime.now(UTC), path='/v1/chat/completions')]); "
    "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('opentelemetry.')}), "
    "sorted(type(o).__name__ for o in services._observers))"
)


def probe(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=PROJECT_ROOT,
        env=clean_environ({"DJANGO_SETTINGS_MODULE": "marina.settings", **env}),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_an_endpoint_nothing_of_opentelemetry_is_loaded():
    closed = f"http://127.0.0.1:{free_port()}"
    environments = [
        {},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": closed, "OTEL_SDK_DISABLED": "true"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": closed, "OTEL_TRACES_EXPORTER": "none"},
        *({variable: closed, "OTEL_EXPORTER_OTLP_TIMEOUT": "1"} for variable in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")),
    ]
    # Five interpreters setting Django up: at once, not one after another (a second of CPU apiece).
    with ThreadPoolExecutor(len(environments)) as pool:
        unset, disabled, no_exporter, *loaded = pool.map(lambda env: probe(**env), environments)
    assert unset.returncode == 0, unset.stderr
    assert unset.stdout.strip() == "[] ['Observer']"
    assert disabled.stdout.strip() == "[] ['Observer']"
    assert no_exporter.stdout.strip() == "[] ['Observer']"
    for each in loaded:
        assert each.returncode == 0, each.stderr
        assert "'sdk'" in each.stdout and "'exporter'" in each.stdout and "['Exporter', 'Observer']" in each.stdout


@pytest.mark.parametrize(
    "env, message",
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "127.0.0.1:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT must be an http:// or https:// URL, not '127.0.0.1:4318'"),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_PROTOCOL: Marina exports OTLP over HTTP (http/protobuf) only, not 'grpc'",
        ),
    ],
)
def test_a_malformed_otel_setting_stops_start_up_in_one_line(env: dict[str, str], message: str):
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=PROJECT_ROOT, env=clean_environ(env), capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [f"Marina's configuration: {message}"]


def test_the_demo_never_exports_its_synthetic_traces(transactional_db, otlp_receiver, monkeypatch):
    """`manage.py demo` with an OTLP endpoint set: its traffic stays in the ledger (`demo --remove`
    could not take it back from the backend)."""
    from ledger.demo import load_demo

    exporter = start_exporter(monkeypatch, otlp_receiver.base_url)
    try:
        made = load_demo(days=1, seed=0)
        assert made.traces > 0 and Trace.objects.filter(request_id__startswith="demo-").count() == made.traces
    finally:
        services.remove_observer(exporter)
        exporter.shutdown()  # flushes whatever was queued
    assert otlp_receiver.spans == []
