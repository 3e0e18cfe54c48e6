"""The ledger's spool in one process (ledger/spend/spool.py): records survive
the journal unchanged, a replay writes each once (a request id already
recorded is skipped with its spend), and the bound is kept. The database
killed under load, and workers killed mid-replay: tests/e2e/test_spool.py."""
from __future__ import annotations

import os
from datetime import UTC, datetime

import pytest

from ledger.models import SpendDaily, Trace
from ledger.spend import services
from ledger.spend.records import SpanRecord, TraceRecord
from ledger.spend.spool import Spool, dumps, loads


def record(n: int, **values: object) -> TraceRecord:
    now = datetime.now(UTC)
    span = SpanRecord(seq=0, name="upstream", started_at=now, provider="openrouter", upstream_model="openai/gpt-5.2",
                      http_status=200, prompt_tokens=10, completion_tokens=2, cost_nanousd=1_000 + n,
                      detail={"queued_ms": 1.5}, body={"request": {"messages": ["a\x00b", "é"]}})
    return TraceRecord(request_id=f"req-spool-{n}", started_at=now, path="/v1/chat/completions", key_name="k",
                       requested_model="openrouter/openai/gpt-5.2", spans=[span], client_request_id="job-42", **values)


def test_a_record_comes_back_from_the_journal_unchanged():
    for body in (None, {"huge": 2**70, "lone": "\ud800"}):  # the second goes through json, not orjson
        trace = record(1, body=body)
        line = dumps(trace)
        assert line.endswith(b"\n") and b"\x00" not in line and line.count(b"\n") == 1
        assert loads(line) == trace


@pytest.fixture
def fresh_spool(settings, tmp_path, monkeypatch):
    settings.MARINA_SPOOL_DIR = str(tmp_path)
    fresh = Spool()
    monkeypatch.setattr(services, "spool", fresh)
    return fresh


def test_a_replay_writes_each_record_once_and_counts_what_it_holds(transactional_db, fresh_spool):
    traces = [record(n) for n in range(5)]
    services.record_requests(traces[:2])  # written, then (say) the connection died before it said so
    assert fresh_spool.append(traces) == [True] * 5
    day = traces[0].spans[0].started_at.date()
    assert len(fresh_spool) == 5 and fresh_spool.pending_spend(day) == sum(1_000 + n for n in range(5))
    assert services._replay()
    assert len(fresh_spool) == 0 and fresh_spool.pending_spend(day) == 0
    assert sorted(Trace.objects.values_list("request_id", flat=True)) == sorted(t.request_id for t in traces)
    row = SpendDaily.objects.get()
    assert (row.calls, row.cost_nanousd) == (5, sum(1_000 + n for n in range(5)))


def test_the_bound_is_kept_and_the_cap_told_before_it(transactional_db, fresh_spool, settings):
    settings.MARINA_SPOOL_MAX_BYTES = 300 << 10
    line = len(dumps(record(0)))
    assert not fresh_spool.nearly_full()
    kept = fresh_spool.append([record(n) for n in range(2 * (300 << 10) // line)])
    assert 0 < sum(kept) < len(kept) and kept == sorted(kept, reverse=True)  # the first ones, then none
    assert fresh_spool.nearly_full()
    assert services._replay() and not fresh_spool.nearly_full()
    assert Trace.objects.count() == sum(kept)


def test_a_clean_restart_claims_an_empty_journal_without_a_warning(fresh_spool, caplog):
    """A worker that stopped cleanly leaves its journal empty: nothing to replay, nothing to say.
    One that died holding records is named with their number."""
    clean, crashed = Spool(), Spool()
    clean.open()
    assert crashed.append([record(7)]) == [True]
    for ended in (clean, crashed):
        assert ended._own is not None
        os.close(ended._own.fd)  # the process ended: its lock is free
    with caplog.at_level("WARNING", logger="ledger.spend.spool"):
        fresh_spool.claim_orphans()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and warnings[0].startswith("ledger spool: replaying 1 records left by a process that ended")
    assert len(fresh_spool) == 1
