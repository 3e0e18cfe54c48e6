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
from ledger.spend.spool import HEADROOM_BYTES, Spool, dumps, loads, unwritable


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


def refusal(n: int) -> TraceRecord:
    """A call refused before any provider (the cap's 503): a trace without an upstream span."""
    now = datetime.now(UTC)
    return TraceRecord(request_id=f"req-refused-{n}", started_at=now, path="/v1/chat/completions", key_name="k",
                       requested_model="openrouter/openai/gpt-5.2", status="error", http_status=503,
                       error_kind="spend_cap_unavailable", spans=[SpanRecord(seq=0, name="request", started_at=now)])


def test_refusals_never_take_the_room_kept_for_admitted_calls(transactional_db, fresh_spool, settings):
    """Issue 42 A5: at its edge the spool keeps HEADROOM_BYTES for calls already
    admitted; refusals past that are counted, not journaled, and every answered
    call that comes after them still finds room."""
    settings.MARINA_SPOOL_MAX_BYTES = 300_000  # the probe's setting
    answered = [record(n) for n in range(400)]
    admitted_line = len(dumps(answered[0]))
    # Answered calls up to the cap's refusal point (less than HEADROOM_BYTES left).
    before = 0
    while not fresh_spool.nearly_full():
        assert fresh_spool.append([answered[before]]) == [True]
        before += 1
    # Then hundreds of refusals (469 in the probe), among the streams still in flight.
    refused = [refusal(n) for n in range(469)]
    assert fresh_spool.append(refused) == [True] * len(refused)  # kept: as counts
    assert fresh_spool.refusals_counted == len(refused)
    assert len(fresh_spool) == before  # not one refusal took a line of the journal
    # The calls in flight finish: the headroom holds HEADROOM_BYTES // their line of them.
    in_flight = HEADROOM_BYTES // admitted_line - 1
    assert in_flight > 100
    finishing = answered[before: before + in_flight]
    assert fresh_spool.append(finishing) == [True] * in_flight
    assert services._replay()
    assert Trace.objects.count() == before + in_flight  # every answered call, no refusal
    assert not Trace.objects.filter(request_id__startswith="req-refused-").exists()


def test_refusals_are_journaled_while_the_room_is_whole(transactional_db, fresh_spool, settings):
    settings.MARINA_SPOOL_MAX_BYTES = 300_000
    assert fresh_spool.append([refusal(0), record(0)]) == [True, True]
    assert fresh_spool.refusals_counted == 0 and len(fresh_spool) == 2
    assert services._replay()
    assert set(Trace.objects.values_list("request_id", flat=True)) == {"req-refused-0", "req-spool-0"}


def test_a_spool_that_cannot_be_written_says_so_naming_the_directory(transactional_db, fresh_spool, settings, tmp_path):
    """Issue 42 A6/A7: the start-up check and a spool broken later both name
    MARINA_SPOOL_DIR, not the database."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    assert unwritable(tmp_path / "ok") == ""
    assert (tmp_path / "ok").is_dir() and not list((tmp_path / "ok").iterdir())  # the probe is gone
    problem = unwritable(blocker / "spool")
    assert problem.startswith(f"MARINA_SPOOL_DIR={blocker / 'spool'} cannot be written (")
    settings.MARINA_SPOOL_DIR = str(blocker / "spool")
    fresh_spool.open()
    assert fresh_spool.nearly_full()
    assert fresh_spool.problem().startswith(f"MARINA_SPOOL_DIR={blocker / 'spool'} cannot be written")
    assert "database" not in fresh_spool.problem()


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
