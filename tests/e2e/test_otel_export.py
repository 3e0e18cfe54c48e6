"""OpenTelemetry export from a real two-worker gunicorn to a real OTLP/HTTP
otlp_receiver on loopback (tests/otlp_receiver.py): every request's spans arrive
with ids derived from the ledger's trace, whichever worker served it; a
collector that accepts exports and never answers costs the calls nothing and
the ledger no row."""
from __future__ import annotations

from datetime import UTC, datetime

import openai
import pytest

from observability import spans
from tests.conftest import MARINA_KEY
from tests.e2e.conftest import find_secrets
from tests.e2e.servers import Ledger
from tests.upstream import Reply, Sse, completion

pytestmark = pytest.mark.e2e

MODEL = "openrouter/openai/gpt-5.2"



def started_at(ledger: Ledger, request_id: str) -> datetime:
    value = ledger.one("SELECT started_at FROM ledger_trace WHERE request_id = %s", (request_id,))
    if isinstance(value, str):  # SQLite keeps UTC as text
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_every_request_through_gunicorn_reaches_the_collector(servers, upstream, otlp_receiver, backend):
    streamed_usage = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15, "cost": 0.0002}
    upstream.handler = lambda body: (
        Sse(usage=streamed_usage) if body.get("stream") else Reply(json=completion("ok", prompt_tokens=12, completion_tokens=3, cost=0.0002))
    )
    ledger = servers.postgres() if backend == "postgres" else servers.sqlite()
    server = servers.start(ledger, OTEL_EXPORTER_OTLP_ENDPOINT=otlp_receiver.base_url, OTEL_BSP_SCHEDULE_DELAY="100")
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=MARINA_KEY, max_retries=0)
    ids = []
    for n in range(12):
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=[{"role": "user", "content": f"q{n}"}])
        ids.append(raw.headers["x-request-id"])
    with client.chat.completions.with_streaming_response.create(
        model=MODEL, messages=[{"role": "user", "content": "stream"}], stream=True
    ) as streamed:
        ids.append(streamed.headers["x-request-id"])
        assert "[DONE]" in "".join(streamed.iter_lines())
    otlp_receiver.wait_for(
        lambda: {s.attributes.get("marina.request_id") for s in otlp_receiver.spans} >= set(ids), "every request's root span", timeout=60
    )
    otlp_receiver.wait_for(lambda: len(otlp_receiver.spans) >= 2 * len(ids), "every upstream call's span", timeout=60)

    for request_id in ids:
        trace_id, root_id, seed = spans.trace_ids(request_id, started_at(ledger, request_id))
        found = otlp_receiver.of_trace(f"{trace_id:032x}")
        root = next(s for s in found if not s.parent_span_id)
        [call] = [s for s in found if s.parent_span_id]
        assert root.span_id == f"{root_id:016x}" and call.parent_span_id == root.span_id
        assert call.span_id == f"{spans.step_span_id(seed, 0):016x}"
        assert root.attributes["marina.key_name"] == "tester" and root.attributes["marina.request.model"] == MODEL
        assert call.attributes["gen_ai.usage.input_tokens"] == 12 and call.attributes["marina.cost_usd"] == pytest.approx(0.0002)
    assert [s for s in otlp_receiver.spans if s.attributes.get("marina.request_id") == ids[-1]][0].attributes["marina.request.stream"] is True
    assert len(otlp_receiver.spans) == 2 * len(ids), "each span once"
    assert not any(find_secrets(body.decode("utf-8", "replace")) for body in otlp_receiver.raw)


def test_a_stuck_collector_costs_the_calls_nothing_and_the_ledger_no_row(servers, upstream, otlp_receiver):
    otlp_receiver.hang()  # takes every export request and never answers
    server = servers.start(
        OTEL_EXPORTER_OTLP_ENDPOINT=otlp_receiver.base_url, OTEL_BSP_SCHEDULE_DELAY="50", OTEL_EXPORTER_OTLP_TIMEOUT="120"
    )
    assert server.ledger is not None
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key=MARINA_KEY, max_retries=0)
    calls = 0
    # One client, one kept-alive connection: every call goes to the same worker.
    # Call until its exporter is stuck on the collector.
    while otlp_receiver.hanging < 1:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "warm"}])
        calls += 1
        assert calls < 500, "the exporters never reached the collector"
    for n in range(40):
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=[{"role": "user", "content": str(n)}])
        assert raw.http_response.status_code == 200
        calls += 1
    # Every call was answered and committed while the export was still held; nothing arrived.
    assert otlp_receiver.hanging >= 1 and otlp_receiver.spans == []
    assert server.ledger.totals()["traces"] == calls
    assert server.ledger.totals()["spend_calls"] == calls
    otlp_receiver.release()  # so that the servers' shutdown does not wait on it
