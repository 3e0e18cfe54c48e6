"""Trace retention: prune_traces deletes old traces and spans in committed
batches and nothing else; the servers prune on their own when
MARINA_TRACE_RETENTION_DAYS is set."""
from __future__ import annotations

import io
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.db.models import Sum

from ledger.models import BenchmarkItem, Span, SpendDaily, Trace
from ledger.spend import retention
from tests.conftest import MARINA_KEY
from tests.ledger.conftest import import_fixture
from tests.ledger.report_builders import record_trace

NOW = datetime.now(UTC)
VERIFY_CALLS = [("openrouter/openai/gpt-5.2", 1_000_000)] * 3


def _ledger(old: int = 5, new: int = 2) -> None:
    for n in range(old):
        record_trace(request_id=f"old-{n}", model="marina/verify:openrouter/openai/gpt-5.2",
                     started_at=NOW - timedelta(days=40, minutes=n), calls=VERIFY_CALLS)  # fmt: skip
    for n in range(new):
        record_trace(request_id=f"new-{n}", model="openrouter/openai/gpt-5.2", started_at=NOW - timedelta(days=1, minutes=n))


def _spend() -> dict[str, int]:
    return SpendDaily.objects.aggregate(calls=Sum("calls"), cost=Sum("cost_nanousd"))


def test_pruning_deletes_old_traces_and_spans_only(db) -> None:
    run = import_fixture("airline-oracle", target="openrouter/oracle-agent")
    _ledger()
    spend, items = _spend(), list(BenchmarkItem.objects.values_list("pk", "reward"))
    result = retention.prune_traces(NOW - timedelta(days=30), size=2)
    assert (result.traces, result.spans, result.batches) == (5, 20, 3)  # 1 verify span + 3 calls each
    assert sorted(Trace.objects.values_list("request_id", flat=True)) == ["new-0", "new-1"]
    assert Span.objects.count() == 2
    assert _spend() == spend  # spend_daily is never pruned
    assert list(BenchmarkItem.objects.values_list("pk", "reward")) == items and run.items.count() == 40


def test_a_dry_run_counts_and_deletes_nothing(db) -> None:
    _ledger()
    result = retention.prune_traces(NOW - timedelta(days=30), dry_run=True)
    assert (result.traces, result.spans) == (5, 20) and Trace.objects.count() == 7


def test_each_batch_is_committed_on_its_own(transactional_db) -> None:
    """Writers wait at most one batch: what a batch deleted is gone for every
    other connection as soon as the batch ends, not when the pruning does."""
    _ledger(old=6, new=0)
    seen: list[int] = []

    def count_elsewhere() -> None:
        try:
            seen.append(Trace.objects.count())
        finally:
            connection.close()

    def after_batch(done: retention.Pruned) -> None:
        assert not connection.in_atomic_block
        reader = threading.Thread(target=count_elsewhere)
        reader.start()
        reader.join()

    retention.prune_traces(NOW, size=2, on_batch=after_batch)
    assert seen == [4, 2, 0]


def test_the_command(db, settings) -> None:
    _ledger()
    settings.MARINA_TRACE_RETENTION_DAYS = None
    with pytest.raises(CommandError, match="Traces are kept: give --before DATE, or set MARINA_TRACE_RETENTION_DAYS"):
        call_command("prune_traces")
    with pytest.raises(CommandError, match="in the future"):
        call_command("prune_traces", "--before", (NOW + timedelta(days=2)).date().isoformat())
    with pytest.raises(CommandError, match="'last week' is not a date"):
        call_command("prune_traces", "--before", "last week")
    out = io.StringIO()
    call_command("prune_traces", "--before", (NOW - timedelta(days=30)).date().isoformat(), "--dry-run", stdout=out)
    assert out.getvalue().startswith("Would delete 5 traces and 20 spans started before") and Trace.objects.count() == 7
    settings.MARINA_TRACE_RETENTION_DAYS = 30
    out = io.StringIO()
    call_command("prune_traces", stdout=out)
    assert out.getvalue().startswith("Deleted 5 traces and 20 spans") and Trace.objects.count() == 2


def test_a_server_prunes_on_its_own_when_retention_is_set(marina, marina_config, monkeypatch) -> None:
    _ledger(old=3, new=1)
    marina_config.MARINA_TRACE_RETENTION_DAYS = 30
    monkeypatch.setattr(retention, "_last_prune", None)
    reply = marina.http.post(
        "/v1/chat/completions", headers={"Authorization": f"Bearer {MARINA_KEY}"},
        json={"model": "openrouter/openai/gpt-5.2", "messages": [{"role": "user", "content": "hi"}]},
    )  # fmt: skip
    assert reply.status_code == 200
    deadline = time.monotonic() + 30
    while Trace.objects.filter(request_id__startswith="old-").exists():
        assert time.monotonic() < deadline, "the server did not prune its old traces"
        time.sleep(0.05)
    assert Trace.objects.count() == 2  # the recent trace and the request just made


def test_the_setting_is_read_from_the_environment(monkeypatch) -> None:
    import subprocess
    import sys
    from concurrent.futures import ThreadPoolExecutor

    probe = "from django.conf import settings; print(settings.MARINA_TRACE_RETENTION_DAYS)"  # the settings module alone reads it
    env = {"DJANGO_SETTINGS_MODULE": "marina.settings", "PATH": "/usr/bin:/bin"}

    def start(raw: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", probe], env={**env, "MARINA_TRACE_RETENTION_DAYS": raw},
                              capture_output=True, text=True)  # fmt: skip

    # Four interpreters: at once, not one after another.
    with ThreadPoolExecutor(4) as pool:
        *good, bad = pool.map(start, ["", "keep", "30", "0"])
    for out, shown in zip(good, ["None", "None", "30"]):
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == shown
    assert bad.returncode != 0 and "MARINA_TRACE_RETENTION_DAYS must be at least 1" in bad.stderr
