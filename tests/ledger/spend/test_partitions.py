"""Traces and spans partitioned by day (ledger/spend/partitions.py) on the
test database itself: PostgreSQL, migrated with MARINA_TRACE_PARTITIONS on (the
default). Retention drops a whole day's partitions, a day made late takes its
rows out of DEFAULT, the writer puts each span in its trace's day, and the
report pages read across days. On SQLite the functions do nothing and the
tables are plain (the last test). The migration of an existing ledger is
tests/e2e/test_trace_partitions.py."""
from __future__ import annotations

import io
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, connection, transaction
from django.test import Client
from django.urls import reverse

from ledger.models import BenchmarkItem, BenchmarkItemTrace, Span, SpendDaily, Trace
from ledger.spend import partitions, retention
from tests.ledger.conftest import import_fixture
from tests.ledger.report_builders import record_trace

NOW = datetime.now(UTC)
OLD = NOW - timedelta(days=40)
VERIFY_CALLS = [("openrouter/openai/gpt-5.2", 1_000_000)] * 3

postgres_only = pytest.mark.skipif("connection.vendor != 'postgresql'", reason="partitions are PostgreSQL's")


def _where(table: str, column: str, value: object) -> set[str]:
    """The partitions holding the rows of `table` where column = value."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT tableoid::regclass::text FROM {table} WHERE {column} = %s", [value])
        return {row[0] for row in cursor.fetchall()}


@postgres_only
def test_the_test_database_is_partitioned_with_the_days_ahead(db, settings) -> None:
    assert partitions.is_partitioned()
    have = set(partitions.days())
    today = NOW.date()
    assert {today + timedelta(days=n) for n in range(-1, settings.MARINA_TRACE_PARTITION_DAYS_AHEAD + 1)} <= have


@postgres_only
def test_the_writer_puts_each_span_in_its_traces_day(db) -> None:
    trace = record_trace(request_id="today", model="marina/verify:openrouter/openai/gpt-5.2", calls=VERIFY_CALLS)
    day = f"p{trace.started_at:%Y%m%d}"
    assert _where("ledger_trace", "id", trace.pk) == {f"ledger_trace_{day}"}
    assert _where("ledger_span", "trace_id", trace.pk) == {f"ledger_span_{day}"}
    assert set(trace.spans.values_list("trace_started_at", flat=True)) == {trace.started_at}
    # A day without a partition of its own (40 days back) lands in DEFAULT: no write fails for want of one.
    old = record_trace(request_id="old", model="openrouter/openai/gpt-5.2", started_at=OLD)
    assert _where("ledger_trace", "id", old.pk) == {"ledger_trace_default"}
    assert _where("ledger_span", "trace_id", old.pk) == {"ledger_span_default"}


@postgres_only
def test_a_day_made_late_takes_its_rows_out_of_default(db) -> None:
    old = record_trace(request_id="old", model="marina/verify:openrouter/openai/gpt-5.2", started_at=OLD, calls=VERIFY_CALLS)
    assert partitions.ensure_days([OLD.date()]) == [OLD.date()]
    assert partitions.ensure_days([OLD.date()]) == []  # made once
    day = f"p{OLD:%Y%m%d}"
    assert _where("ledger_trace", "id", old.pk) == {f"ledger_trace_{day}"}
    assert _where("ledger_span", "trace_id", old.pk) == {f"ledger_span_{day}"}
    assert Span.objects.filter(trace=old).count() == 4  # nothing lost in the move


@postgres_only
def test_retention_drops_whole_days_and_the_links_to_them(db) -> None:
    run = import_fixture("airline-oracle", target="openrouter/oracle-agent")
    olds = [
        record_trace(request_id=f"old-{n}", model="marina/verify:openrouter/openai/gpt-5.2",
                     started_at=OLD - timedelta(minutes=n), calls=VERIFY_CALLS)  # fmt: skip
        for n in range(3)
    ]
    new = record_trace(request_id="new", model="openrouter/openai/gpt-5.2", started_at=NOW - timedelta(days=1))
    partitions.ensure_days([OLD.date()])
    item = run.items.first()
    assert item is not None
    BenchmarkItemTrace.objects.create(item=item, trace=olds[0], role="agent")
    BenchmarkItemTrace.objects.create(item=item, trace=new, role="agent")
    spend = list(SpendDaily.objects.order_by("pk").values_list("calls", "cost_nanousd"))

    result = retention.prune_traces(OLD.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1))

    assert OLD.date() not in partitions.days()
    assert (result.days_dropped, result.traces, result.spans, result.batches) == (1, 3, 12, 0)
    assert list(Trace.objects.values_list("request_id", flat=True)) == ["new"]
    assert list(BenchmarkItemTrace.objects.values_list("trace__request_id", flat=True)) == ["new"]
    assert list(SpendDaily.objects.order_by("pk").values_list("calls", "cost_nanousd")) == spend
    assert BenchmarkItem.objects.filter(run=run).count() == 40  # items keep the figures they copied


@postgres_only
def test_retention_deletes_the_rows_left_before_a_cutoff_inside_a_day(db) -> None:
    """A cutoff at noon: the days before go whole, that morning's rows one by one."""
    cutoff = (NOW - timedelta(days=2)).replace(hour=12, minute=0, second=0, microsecond=0)
    for name, at in [("morning", cutoff - timedelta(hours=3)), ("afternoon", cutoff + timedelta(hours=3)),
                     ("day-before", cutoff - timedelta(days=1))]:  # fmt: skip
        record_trace(request_id=name, model="openrouter/openai/gpt-5.2", started_at=at)
    partitions.ensure_days([cutoff.date() - timedelta(days=1), cutoff.date()])

    result = retention.prune_traces(cutoff)

    assert (result.days_dropped, result.traces, result.batches) == (1, 2, 1)
    assert list(Trace.objects.values_list("request_id", flat=True)) == ["afternoon"]
    assert cutoff.date() in partitions.days()


@postgres_only
def test_report_pages_read_across_days(db, user_client: Client) -> None:
    """Traces of four days (three partitions and DEFAULT) on one list, in order, each
    with its own spans."""
    ats = [NOW - timedelta(days=n, minutes=5) for n in (0, 1, 2, 40)]
    partitions.ensure_days([ats[2].date()])
    made = [
        record_trace(request_id=f"day-{n}", model="marina/verify:openrouter/openai/gpt-5.2", started_at=at, calls=VERIFY_CALLS)
        for n, at in enumerate(ats)
    ]
    assert len({_where("ledger_trace", "id", t.pk).pop() for t in made}) == 4
    html = user_client.get(reverse("reports:traces")).content.decode()
    assert [html.index(f"day-{n}") for n in range(4)] == sorted(html.index(f"day-{n}") for n in range(4))
    for trace in made:
        page = user_client.get(reverse("reports:trace", args=[trace.pk])).content.decode()
        assert page.count("cite the baggage rule") >= 1 and "revision" in page


@postgres_only
def test_a_replayed_trace_is_still_one_row(db) -> None:
    """(request_id, started_at) is unique: the spool replays a trace with its
    own started_at, so a second replay is refused by the database itself."""
    trace = record_trace(request_id="once", model="openrouter/openai/gpt-5.2")
    with pytest.raises(IntegrityError), transaction.atomic():
        Trace.objects.create(request_id="once", started_at=trace.started_at, duration_ms=1, path="/v1/chat/completions",
                             status="ok", http_status=200)  # fmt: skip


@postgres_only
def test_the_command_lists_and_makes_days(db) -> None:
    out = io.StringIO()
    call_command("trace_partitions", "--ensure", stdout=out)
    assert "every day ahead has one" in out.getvalue()
    record_trace(request_id="listed", model="openrouter/openai/gpt-5.2")
    out = io.StringIO()
    call_command("trace_partitions", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[-1].startswith("DEFAULT") and any(line.startswith(f"{NOW:%Y-%m-%d}") for line in lines)


def test_sqlite_keeps_plain_tables(db) -> None:
    if connection.vendor != "sqlite":
        pytest.skip("the SQLite half")
    trace = record_trace(request_id="plain", model="openrouter/openai/gpt-5.2", started_at=OLD)
    assert not partitions.is_partitioned()
    assert partitions.ensure_days_ahead() == [] and partitions.drop_days_before(NOW).days == []
    assert set(trace.spans.values_list("trace_started_at", flat=True)) == {OLD}
    with pytest.raises(CommandError, match="only on PostgreSQL"):
        call_command("trace_partitions")


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_each_server_makes_the_days_ahead_on_its_writer(monkeypatch) -> None:
    """The last day ahead is gone (a server that was down for a week, say): the
    next trace queued makes it again, on the writer thread, once an hour."""
    from kernel import dbwriter as writer
    from ledger.spend import services
    from ledger.spend.records import SpanRecord, TraceRecord

    last = max(partitions.days())
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE ledger_span_p{last:%Y%m%d}")
        cursor.execute(f"ALTER TABLE ledger_trace DETACH PARTITION ledger_trace_p{last:%Y%m%d}")
        cursor.execute(f"DROP TABLE ledger_trace_p{last:%Y%m%d}")
    assert last not in partitions.days()
    monkeypatch.setattr(partitions, "_last_check", None)
    record = TraceRecord(
        request_id="ahead", started_at=NOW, duration_ms=1.0, path="/v1/chat/completions", status="ok",
        http_status=200, spans=[SpanRecord(seq=1, name="upstream", started_at=NOW, provider="openrouter")],
    )  # fmt: skip
    services.submit_record(record).result(10)
    writer.submit(lambda: None).result(10)  # the writer runs its jobs in order: the check came before this
    assert last in partitions.days()
    assert partitions._last_check is not None
    # Within the hour, no second check is queued.
    checks: list[object] = []
    monkeypatch.setattr(partitions, "_extend_step", lambda: checks.append(1))
    services.submit_record(replace(record, request_id="ahead-2", spans=[])).result(10)
    writer.submit(lambda: None).result(10)
    assert checks == []
