"""Issue 16's check for traces: a real τ² run (the unmodified CLI) through a
real gunicorn with an OTLP endpoint shows up in a real OTLP/HTTP otlp_receiver on
loopback, every model call of it, agent's and user simulator's; after the
import, `export_traces` gives the same trace ids with each trace's τ² item."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import MARINA_KEY
from tests.e2e.servers import manage
from tests.e2e.tau2_cli import require_tau2, run_tau2
from tests.e2e.tau2_oracle import find_tasks_file, start_oracle
from tests.otlp_receiver import OtlpReceiver

pytestmark = [pytest.mark.e2e, pytest.mark.tau2]

TAU2 = require_tau2()
TASK_IDS = ["7", "11"]



def test_a_tau2_run_shows_up_as_spans_in_the_collector(servers, tmp_path: Path, otlp_receiver: OtlpReceiver):
    oracle_server, oracle_url = start_oracle(0, tasks_file=find_tasks_file())
    try:
        server = servers.start(
            MARINA_OPENROUTER_BASE_URL=oracle_url, OTEL_EXPORTER_OTLP_ENDPOINT=otlp_receiver.base_url, OTEL_BSP_SCHEDULE_DELAY="200"
        )
        args = {"api_base": f"{server.base_url}/v1", "api_key": MARINA_KEY, "temperature": 0.0}
        results = run_tau2(
            TAU2, env={"TZ": "UTC"}, domain="airline", task_ids=TASK_IDS, num_trials=1,
            agent_llm="openai/openrouter/oracle-agent", user_llm="openai/openrouter/oracle-user",
            agent_args=args, user_args=args, save_dir=tmp_path, name="otel",
        )  # fmt: skip
    finally:
        oracle_server.shutdown()
        oracle_server.server_close()
    ledger = server.ledger
    assert ledger is not None
    request_ids = {r[0] for r in ledger.rows("SELECT request_id FROM ledger_trace")}
    assert len(request_ids) > 2 * len(TASK_IDS), "several calls per simulation"
    otlp_receiver.wait_for(
        lambda: {s.attributes.get("marina.request_id") for s in otlp_receiver.spans} >= request_ids, "every τ² call", timeout=60
    )
    roots = [s for s in otlp_receiver.spans if not s.parent_span_id]
    assert len(roots) == len(request_ids), "one trace per call, once each"
    assert {s.attributes["marina.request.model"] for s in roots} == {"openrouter/oracle-agent", "openrouter/oracle-user"}
    assert all(s.attributes["marina.key_name"] == "tester" for s in roots)
    calls = [s for s in otlp_receiver.spans if s.parent_span_id]
    assert {s.parent_span_id for s in calls} == {s.span_id for s in roots}
    assert {s.attributes["gen_ai.request.model"] for s in calls} == {"oracle-agent", "oracle-user"}
    assert all(s.attributes["gen_ai.usage.input_tokens"] > 0 for s in calls)
    # τ² put Marina's key in its results file; nothing of it went to the collector.
    assert not any(MARINA_KEY.encode() in body for body in otlp_receiver.raw)

    manage("import_tau2", str(results), "--target", "openrouter/oracle-agent", "--require-clean", database_url=ledger.url)
    exported = manage("export_traces", "--since", "2000-01-01", "--format", "jsonl", database_url=ledger.url).stdout
    rows = [json.loads(line) for line in exported.splitlines()]
    exported_roots = {r["trace_id"]: r for r in rows if r["parent_span_id"] is None}
    assert set(exported_roots) == {s.trace_id for s in roots}, "the same trace ids as the live export"
    items = {item for r in exported_roots.values() for item in r["attributes"].get("marina.benchmark.item_id", [])}
    assert items == {f"{task}#0" for task in TASK_IDS}
