"""Prometheus metrics in one process: what a request adds, who may scrape,
and that the exposition passes promtool (the multi-worker scrape by a real
Prometheus is tests/e2e/test_prometheus.py)."""
from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal

import openai
import pytest
from django.test import Client
from prometheus_client import REGISTRY

from ledger.models import SpendDaily
from ledger.spend import services
from ledger.spend.records import SpanRecord, TraceRecord
from observability import metrics
from tests.conftest import MARINA_KEY
from tests.scripted_providers import keyed
from tests.upstream import Reply, completion


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 10) -> None:
    """Metrics are updated on the writer thread just after the caller has its answer."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def test_a_call_adds_request_tokens_cost_and_latency(openai_client, upstream):
    model = "openrouter/openai/gpt-5.2"
    labels = {"door": "chat", "model": model, "provider": "openrouter", "route": "passthru", "status": "ok", "code": "200"}
    bucket = {"key": "tester", "model": model, "provider": "openrouter", "upstream_model": "openai/gpt-5.2"}
    before = {
        "requests": sample("marina_requests_total", **labels),
        "prompt": sample("marina_tokens_total", **bucket, kind="prompt"),
        "completion": sample("marina_tokens_total", **bucket, kind="completion"),
        "cost": sample("marina_cost_usd_total", **bucket),
        "upstream": sample("marina_upstream_duration_seconds_count", provider="openrouter", model="openai/gpt-5.2"),
        "overhead": sample("marina_overhead_seconds_count", route="passthru"),
        "written": sample("marina_ledger_traces_written_total"),
    }
    upstream.script(Reply(json=completion("hi", prompt_tokens=30, completion_tokens=7, cost=0.00125)))
    openai_client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}])
    wait_for(lambda: sample("marina_requests_total", **labels) == before["requests"] + 1, "the request counter")
    assert sample("marina_tokens_total", **bucket, kind="prompt") == before["prompt"] + 30
    assert sample("marina_tokens_total", **bucket, kind="completion") == before["completion"] + 7
    assert sample("marina_cost_usd_total", **bucket) == pytest.approx(before["cost"] + 0.00125)
    assert sample("marina_upstream_duration_seconds_count", provider="openrouter", model="openai/gpt-5.2") == before["upstream"] + 1
    assert sample("marina_overhead_seconds_count", route="passthru") == before["overhead"] + 1
    assert sample("marina_ledger_traces_written_total") >= before["written"] + 1
    # The same dollars as the spend ledger.
    assert SpendDaily.objects.get().cost_usd == Decimal("0.00125")


def test_upstream_errors_and_refusals_are_counted_by_status(openai_client, upstream, marina):
    model = "openrouter/openai/gpt-5.2"
    error_labels = {"door": "chat", "model": model, "provider": "openrouter", "route": "passthru", "status": "error", "code": "429"}
    refused_labels = {"door": "chat", "model": "", "provider": "", "route": "none", "status": "error", "code": "401"}
    before_error = sample("marina_requests_total", **error_labels)
    before_refused = sample("marina_requests_total", **refused_labels)
    before_calls = sample("marina_upstream_calls_total", provider="openrouter", model="openai/gpt-5.2", status="error")
    upstream.script(Reply(status=429, json={"error": {"message": "slow down"}}))
    with pytest.raises(openai.RateLimitError):
        openai_client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}])
    marina.http.post("/v1/chat/completions", json={"model": model, "messages": []})
    wait_for(lambda: sample("marina_requests_total", **refused_labels) == before_refused + 1, "the refused request")
    wait_for(lambda: sample("marina_requests_total", **error_labels) == before_error + 1, "the upstream error")
    assert sample("marina_upstream_calls_total", provider="openrouter", model="openai/gpt-5.2", status="error") == before_calls + 1


def test_each_door_is_its_own_label(marina, upstream, marina_config):
    """Responses, embeddings and Anthropic's Messages counted as themselves, not as chat."""
    keyed(marina_config, upstream, "openai", "anthropic")
    calls = {
        "chat": ("/v1/chat/completions", "openai/gpt-4o-mini", {"messages": [{"role": "user", "content": "x"}]}),
        "responses": ("/v1/responses", "openai/gpt-4o-mini", {"input": "x"}),
        "embeddings": ("/v1/embeddings", "openai/text-embedding-3-small", {"input": "x"}),
        "messages": ("/v1/messages", "anthropic/claude-sonnet-4-5", {"max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}),
    }
    labels = {
        door: {"door": door, "model": model, "provider": model.partition("/")[0], "route": "passthru", "status": "ok", "code": "200"}
        for door, (_, model, _) in calls.items()
    }
    other = {"door": "other", "model": "", "provider": "", "route": "none", "status": "error", "code": "404"}
    before = {door: sample("marina_requests_total", **labels[door]) for door in calls} | {"other": sample("marina_requests_total", **other)}
    auth = {"Authorization": f"Bearer {MARINA_KEY}"}
    for path, model, body in calls.values():
        assert marina.http.post(path, json={"model": model, **body}, headers=auth).status_code == 200
    assert marina.http.post("/v1/no-such-door", json={}, headers=auth).status_code == 404
    for door in calls:
        wait_for(lambda door=door: sample("marina_requests_total", **labels[door]) == before[door] + 1, f"the {door} request")
    wait_for(lambda: sample("marina_requests_total", **other) == before["other"] + 1, "the request on no door")


def test_metrics_answer_loopback_only_without_a_token(db, settings):
    openai_client = Client()
    settings.MARINA_METRICS_TOKEN = ""
    assert openai_client.get("/metrics").status_code == 200
    refused = openai_client.get("/metrics", REMOTE_ADDR="10.1.2.3")
    assert refused.status_code == 403 and b"MARINA_METRICS_TOKEN" in refused.content


@pytest.mark.parametrize("trusted", ["1", "2", "127.0.0.1/32"])
def test_metrics_behind_a_trusted_proxy_answer_only_a_loopback_client(db, settings, trusted):
    """Issue 42 E1: with a count of proxies, the peer is the proxy (127.0.0.1 on
    the same host) and /metrics answered a forwarded outside client."""
    client = Client()
    settings.MARINA_METRICS_TOKEN = ""
    settings.MARINA_TRUSTED_PROXIES = trusted
    assert client.get("/metrics").status_code == 200  # Prometheus on this host, no proxy between
    outside = client.get("/metrics", headers={"x-forwarded-for": "203.0.113.9"})
    assert outside.status_code == 403 and b"spend" not in outside.content
    # A left part the client wrote itself (with one proxy; with two, the second hop is the client).
    chain = client.get("/metrics", headers={"x-forwarded-for": "127.0.0.1, 203.0.113.9"})
    assert chain.status_code == (200 if trusted == "2" else 403)
    assert client.get("/metrics", headers={"x-forwarded-for": "127.0.0.1"}).status_code == 200


def test_metrics_token_is_required_when_set(db, settings):
    openai_client = Client()
    settings.MARINA_METRICS_TOKEN = "scrape-secret-123"
    assert openai_client.get("/metrics").status_code == 401
    assert openai_client.get("/metrics", headers={"authorization": "Bearer wrong"}).status_code == 401
    ok = openai_client.get("/metrics", headers={"authorization": "Bearer scrape-secret-123"}, REMOTE_ADDR="10.1.2.3")
    assert ok.status_code == 200 and ok["content-type"].startswith("text/plain")


def test_spend_today_and_cap_are_read_at_scrape(db, settings):
    settings.MARINA_DAILY_SPEND_CAP_USD = Decimal("12.5")
    SpendDaily.objects.create(
        day=datetime.now(UTC).date(), key_name="k", requested_model="m", provider="p", upstream_model="m",
        calls=1, cost_nanousd=2_250_000_000,
    )
    text = metrics.render().decode()
    assert "marina_spend_today_usd 2.25" in text
    assert "marina_spend_cap_usd 12.5" in text
    settings.MARINA_DAILY_SPEND_CAP_USD = None
    assert "marina_spend_cap_usd" not in metrics.render().decode()


def test_a_failing_observer_loses_no_ledger_row(transactional_db):
    class Broken(services.WriterObserver):
        def committed(self, traces):
            raise RuntimeError("observer bug")

    broken = Broken()
    services.add_observer(broken)
    try:
        record = TraceRecord(
            request_id="req-observer", started_at=datetime.now(UTC), path="/v1/chat/completions",
            spans=[SpanRecord(seq=0, name="upstream", started_at=datetime.now(UTC), provider="openrouter", upstream_model="m")],
        )
        services.submit_record(record).result(timeout=30)
    finally:
        services.remove_observer(broken)
    assert SpendDaily.objects.get().calls == 1


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool comes with Debian's prometheus package (scripts/test installs it)")
def test_promtool_finds_no_problem(db):
    metrics.count_trace(
        TraceRecord(request_id="req-lint", started_at=datetime.now(UTC), path="/v1/chat/completions", route="passthru")
    )
    lint = subprocess.run(["promtool", "check", "metrics"], input=metrics.render(), capture_output=True, timeout=60)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_model_ids_no_provider_knows_are_one_label_and_one_spend_row(openai_client, upstream, marina):
    """Issue 24: every requested id (even one that 404s) was a series, and a spend_daily row."""
    upstream.handler = lambda body: Reply(status=404, json={"error": {"message": "no such model"}})
    ids = [f"openrouter/made-up-{n}" for n in range(30)]
    for model in ids:
        with pytest.raises(openai.NotFoundError):
            openai_client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}])
    labels = {"door": "chat", "model": "other", "provider": "openrouter", "route": "passthru", "status": "error", "code": "404"}
    wait_for(lambda: sample("marina_requests_total", **labels) >= 30, "the 404s, as one label")
    text = metrics.render().decode()
    assert not [model for model in ids if model in text]
    assert list(SpendDaily.objects.values_list("requested_model", "upstream_model", "calls", "errors")) == [("other", "other", 30, 30)]


def test_key_names_past_the_bound_are_other(db, monkeypatch):
    monkeypatch.setattr(metrics, "_keys", set())
    monkeypatch.setattr(metrics, "MAX_KEYS", 3)
    now = datetime.now(UTC)
    for n in range(10):
        span = SpanRecord(seq=0, name="upstream", started_at=now, provider="openrouter", upstream_model="openai/gpt-5.2",
                          http_status=200, prompt_tokens=1, cost_nanousd=10)
        metrics.count_trace(TraceRecord(request_id=f"req-k{n}", started_at=now, path="/v1/chat/completions",
                                        key_name=f"agent-{n}", requested_model="openrouter/openai/gpt-5.2", spans=[span]))
    keys = {s.labels["key"] for metric in REGISTRY.collect() if metric.name == "marina_cost_usd" for s in metric.samples}
    assert {f"agent-{n}" for n in range(10)} & keys == {"agent-0", "agent-1", "agent-2"}
    assert "other" in keys
