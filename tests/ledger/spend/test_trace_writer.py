"""ledger/trace_writer.py stores traces, spans and spend exactly as the ORM
would: each row is read back through the ORM and compared with what an
ORM-created twin of it holds. Run on PostgreSQL too with DATABASE_URL."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import IntegrityError

from ledger.models import Span, SpendDaily, Trace
from ledger.spend import services
from ledger.spend.records import SpanRecord, TraceRecord

T0 = datetime(2026, 3, 4, 23, 59, 58, 123456, tzinfo=UTC)


def _record(request_id: str = "req-1", *, cost: int | None = 1_230_000) -> TraceRecord:
    spans = [
        SpanRecord(seq=0, name="verify", started_at=T0, duration_ms=5.5, detail={"verdict": "ok", "n": [1, 2]}),
        SpanRecord(
            seq=1, name="upstream", parent_seq=0, started_at=T0 + timedelta(seconds=1), duration_ms=12.25,
            provider="openrouter", upstream_model="openai/gpt-5.2", http_status=200, ttft_ms=3.5,
            prompt_tokens=100, completion_tokens=20, cached_tokens=7, reasoning_tokens=3,
            cost_nanousd=cost, cost_source="provider" if cost is not None else "none",
            body={"request": {"model": "x", "messages": [{"role": "user", "content": "é ✓"}]}},
        ),
        SpanRecord(
            seq=2, name="upstream", started_at=T0 + timedelta(seconds=2), provider="openrouter",
            upstream_model="openai/gpt-5.2", status="error", http_status=502, error_kind="reset",
        ),
    ]
    return TraceRecord(
        request_id=request_id, started_at=T0, path="/v1/chat/completions", duration_ms=20.5, overhead_ms=1.25,
        key_name="tester", requested_model="openrouter/openai/gpt-5.2", route="verify", formation_label="on",
        session="s-1", stream=True, status="ok", http_status=200, body={"model": "m", "n": None, "x": 1.5},
        spans=spans,
    )


def _orm_twin(record: TraceRecord) -> Trace:
    """What record_request stored before it used trace_writer: the ORM's own rows."""
    upstream = [s for s in record.spans if s.is_upstream_call]
    costs = [s.cost_nanousd for s in upstream if s.cost_nanousd is not None]
    row = Trace.objects.create(
        request_id=record.request_id + "-orm", started_at=record.started_at, duration_ms=record.duration_ms,
        overhead_ms=record.overhead_ms, method=record.method, path=record.path, key_name=record.key_name,
        requested_model=record.requested_model, route=record.route, formation_label=record.formation_label,
        session=record.session, stream=record.stream, status=record.status, http_status=record.http_status,
        error_kind=record.error_kind, error_message=record.error_message,
        prompt_tokens=sum(s.prompt_tokens for s in upstream),
        completion_tokens=sum(s.completion_tokens for s in upstream),
        cost_nanousd=sum(costs) if costs else None, body=record.body,
    )
    for s in record.spans:
        Span.objects.create(
            trace=row, seq=s.seq, parent_seq=s.parent_seq, name=s.name, provider=s.provider,
            upstream_model=s.upstream_model, status=s.status, http_status=s.http_status, error_kind=s.error_kind,
            started_at=s.started_at, duration_ms=s.duration_ms, ttft_ms=s.ttft_ms, prompt_tokens=s.prompt_tokens,
            completion_tokens=s.completion_tokens, cached_tokens=s.cached_tokens,
            reasoning_tokens=s.reasoning_tokens, cost_nanousd=s.cost_nanousd, cost_source=s.cost_source,
            detail=s.detail, body=s.body,
        )
    return row


def _view(trace: Trace) -> tuple[dict, list[dict]]:
    skip = {"id", "request_id", "trace", "trace_id"}
    fields = [f.attname for f in Trace._meta.concrete_fields if f.attname not in skip]
    span_fields = [f.attname for f in Span._meta.concrete_fields if f.attname not in skip]
    trace = Trace.objects.get(pk=trace.pk)  # as read back from the database
    return (
        {f: getattr(trace, f) for f in fields},
        [{f: getattr(s, f) for f in span_fields} for s in trace.spans.order_by("seq")],
    )


@pytest.mark.django_db
def test_rows_read_back_like_the_orms():
    record = _record()
    written, twin = services.record_request(record), _orm_twin(record)
    assert _view(written) == _view(twin)
    view, spans = _view(written)
    assert view["started_at"] == T0 and view["body"] == {"model": "m", "n": None, "x": 1.5}
    assert view["cost_nanousd"] == 1_230_000 and view["prompt_tokens"] == 100
    assert spans[1]["body"]["request"]["messages"][0]["content"] == "é ✓" and spans[0]["detail"]["n"] == [1, 2]


@pytest.mark.django_db
def test_spend_is_upserted_per_upstream_call():
    """Each upstream span counts on its own UTC day (the third span starts
    just after midnight)."""
    services.record_requests([_record("a"), _record("b", cost=None)])
    first, second = SpendDaily.objects.order_by("day")
    assert (first.day, second.day) == (T0.date(), T0.date() + timedelta(days=1))
    assert (first.calls, first.errors, first.unpriced_calls) == (2, 0, 1)
    assert (first.prompt_tokens, first.completion_tokens, first.cached_tokens, first.cost_nanousd) == (200, 40, 14, 1_230_000)
    # Failed calls without a cost are errors, not unpriced calls (issue 42).
    assert (second.calls, second.errors, second.unpriced_calls, second.cost_nanousd) == (2, 2, 0, 0)


@pytest.mark.django_db(transaction=True)
def test_batched_writes_isolate_a_bad_record():
    """The writer thread commits waiting traces together; a record that fails
    fails alone, and the others are still written."""
    good = _record("good")
    bad = _record("bad")
    bad.spans.append(SpanRecord(seq=0, name="duplicate seq", started_at=T0))  # violates span_unique_seq
    futures = [services.submit_record(good), services.submit_record(bad), services.submit_record(_record("also-good"))]
    results = []
    for f in futures:
        try:
            f.result(10)
            results.append("ok")
        except IntegrityError:
            results.append("integrity")
    assert results == ["ok", "integrity", "ok"]
    assert sorted(Trace.objects.values_list("request_id", flat=True)) == ["also-good", "good"]
    services.close_writer_connection()


@pytest.mark.django_db(transaction=True)
def test_a_dead_writer_connection_is_replaced():
    """PostgreSQL drops the writer's connection (a restart, an idle timeout):
    the next batch fails once on it, then is written on a new connection,
    without waiting for the next health check."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (DATABASE_URL=postgres://...)")
    services.submit_record(_record("before")).result(10)
    backend_pid = services.submit(lambda: connection.connection.info.backend_pid).result(10)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [backend_pid])
    services.submit_record(_record("after")).result(10)
    assert sorted(Trace.objects.values_list("request_id", flat=True)) == ["after", "before"]
    services.close_writer_connection()


@pytest.mark.django_db
def test_a_nul_character_in_a_traced_body_does_not_lose_the_trace():
    # PostgreSQL's jsonb refuses \u0000; the trace is kept with the NUL replaced.
    record = _record("req-nul")
    record.body = {"messages": [{"role": "user", "content": "a\x00b"}], "k\x00": 1}
    record.spans[1].body = {"request": {"content": "x\x00"}}
    services.record_request(record)
    trace = Trace.objects.get(request_id="req-nul")
    assert trace.body == {"messages": [{"role": "user", "content": "a\ufffdb"}], "k\ufffd": 1}
    assert trace.spans.get(seq=1).body == {"request": {"content": "x\ufffd"}}
    assert sum(SpendDaily.objects.values_list("calls", flat=True)) == 2


def _two_calls_to_one_model(request_id: str) -> TraceRecord:
    """A formation's request: two upstream calls to one model on one day, one failed."""
    record = _record(request_id)
    record.spans[2].started_at = T0  # the same UTC day as the first call: one spend row
    record.spans[2].prompt_tokens, record.spans[2].cost_nanousd = 50, 70_000
    return record


@pytest.mark.django_db
def test_two_calls_to_one_model_in_one_request_add_up():
    """PostgreSQL writes a request as one statement, whose upsert may touch
    each spend row once: the calls of one key are summed before it."""
    services.record_requests([_two_calls_to_one_model("a")])
    services.record_requests([_two_calls_to_one_model("b"), _two_calls_to_one_model("c")])
    (row,) = SpendDaily.objects.all()
    assert (row.calls, row.errors, row.unpriced_calls) == (6, 3, 0)
    assert (row.prompt_tokens, row.completion_tokens, row.cost_nanousd) == (450, 60, 3 * 1_300_000)
    assert Span.objects.count() == 9 and set(Trace.objects.values_list("cost_nanousd", flat=True)) == {1_300_000}


@pytest.mark.django_db(transaction=True)
def test_postgresql_commits_a_lone_trace_in_one_prepared_statement(monkeypatch):
    """One round trip for the trace the chat route waits on: one statement,
    prepared, no BEGIN or COMMIT around it, and committed (another connection
    sees it) when record_requests returns."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (DATABASE_URL=postgres://...)")
    import psycopg

    connection.ensure_connection()  # opening it runs statements of its own
    sent: list[tuple[str, bool | None]] = []
    execute = psycopg.Cursor.execute

    def counted(self, query, params=None, *, prepare=None, **kw):
        sent.append((str(query), prepare))
        return execute(self, query, params, prepare=prepare, **kw)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    with CaptureQueriesContext(connection) as through_django:
        (trace_id,) = services.record_requests([_record("lone")])
    assert len(through_django) == 0 and len(sent) == 1
    assert sent[0][0].startswith("WITH t AS (INSERT INTO") and sent[0][1] is True
    assert "%s" not in sent[0][0] and "$58" in sent[0][0]  # PostgreSQL's own placeholders: psycopg converts none
    prepared = connection.connection.execute("SELECT statement FROM pg_prepared_statements").fetchall()
    assert [row[0][:22] for row in prepared] == ["WITH t AS (INSERT INTO"]
    settings = connection.settings_dict
    with psycopg.connect(host=settings["HOST"], port=settings["PORT"], user=settings["USER"], dbname=settings["NAME"]) as other:
        spans = other.execute("SELECT count(*) FROM ledger_span WHERE trace_id = %s", [trace_id]).fetchone()
        calls = other.execute("SELECT sum(calls) FROM spend_daily").fetchone()
    assert spans == (3,) and calls == (2,)
    assert _view(Trace.objects.get(pk=trace_id)) == _view(_orm_twin(_record("lone")))


@pytest.mark.django_db(transaction=True)
def test_a_trace_with_more_spans_than_one_statement_takes_is_written_whole(monkeypatch):
    """Past ONE_STATEMENT_MAX_SPANS (PostgreSQL's parameter limit) the trace
    is written as several statements in a transaction, the same rows."""
    from ledger.spend import trace_writer

    def too_many_parameters(cursor, trace, conn):
        raise AssertionError("a trace past the limit went into one statement")

    monkeypatch.setattr(trace_writer, "ONE_STATEMENT_MAX_SPANS", 2)  # _record has three spans
    monkeypatch.setattr(trace_writer, "_execute_one_statement", too_many_parameters)
    (trace_id,) = services.record_requests([_record("many")])
    assert _view(Trace.objects.get(pk=trace_id)) == _view(_orm_twin(_record("many")))
    assert sum(SpendDaily.objects.values_list("calls", flat=True)) == 2


@pytest.mark.django_db(transaction=True)
def test_sqlite_writes_on_the_drivers_connection_in_one_transaction():
    """On SQLite the trace's statements go to the driver's cursor with `?`
    already in them (the driver takes no `%s`): Django's SQLite cursor would
    rewrite `%s` with a regular expression on every execute (7 % of a plain
    call's instructions). Its transaction too is the driver's: BEGIN IMMEDIATE
    (the settings' transaction_mode: the write lock taken up front), the three
    statements, COMMIT; nothing through Django's cursor. The rows are the ORM's
    own (as the tests above)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    if connection.vendor != "sqlite":
        pytest.skip("SQLite's path")
    connection.ensure_connection()
    sent: list[str] = []
    connection.connection.set_trace_callback(sent.append)
    try:
        with CaptureQueriesContext(connection) as through_django:
            (trace_id,) = services.record_requests([_record("lone")], notify=False)
    finally:
        connection.connection.set_trace_callback(None)
    assert len(through_django) == 0
    # (the driver reports each row of an executemany: three spans, two spend rows)
    assert [" ".join(q.split()[:3]) for q in sent] == [
        "BEGIN IMMEDIATE", 'INSERT INTO "ledger_trace"', *['INSERT INTO "ledger_span"'] * 3, *["INSERT INTO spend_daily"] * 2,
        "COMMIT",
    ]  # fmt: skip
    assert "%s" not in "".join(sent)
    assert (connection.autocommit, connection.in_atomic_block, connection.connection.in_transaction) == (True, False, False)
    assert (Span.objects.filter(trace_id=trace_id).count(), sum(SpendDaily.objects.values_list("calls", flat=True))) == (3, 2)
    assert _view(Trace.objects.get(pk=trace_id)) == _view(_orm_twin(_record("lone")))


def _stored() -> tuple[int, int, int]:
    return Trace.objects.count(), Span.objects.count(), sum(SpendDaily.objects.values_list("calls", flat=True))


@pytest.mark.django_db(transaction=True)
def test_a_failure_inside_the_writers_transaction_leaves_nothing():
    """The trace, its spans and its spend commit together or not at all: a
    span the database refuses (after the trace's INSERT) rolls the trace back,
    the error is Django's, and the connection is left out of any transaction
    for the next write. On PostgreSQL a lone trace is one statement; a batch
    is in one transaction."""
    from django.db import connection

    bad = _record("bad")
    bad.spans.append(SpanRecord(seq=0, name="duplicate seq", started_at=T0))  # violates span_unique_seq
    for traces in ([bad], [_record("good"), bad]):
        with pytest.raises(IntegrityError):
            services.record_requests(traces, notify=False)
        assert _stored() == (0, 0, 0)
        assert (connection.autocommit, connection.in_atomic_block, connection.needs_rollback) == (True, False, False)
    services.record_requests([_record("next")], notify=False)
    assert _stored() == (1, 3, 2)


class _FailingConnection:
    """A driver connection whose COMMIT (and, with `rollback_fails`, ROLLBACK) fails as a database gone would."""

    def __init__(self, raw, *, rollback_fails: bool = False):
        self.raw, self.rollback_fails, self.rolled_back = raw, rollback_fails, False

    def __getattr__(self, name):
        return getattr(self.raw, name)

    def commit(self):
        import sqlite3

        raise sqlite3.OperationalError("disk I/O error")

    def rollback(self):
        import sqlite3

        if self.rollback_fails:
            raise sqlite3.OperationalError("disk I/O error")
        self.rolled_back = True
        self.raw.rollback()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("rollback_fails", [False, True])
def test_sqlite_a_failed_commit_rolls_back_or_closes_the_connection(rollback_fails):
    """As transaction.atomic(): a COMMIT that fails is rolled back and its error
    raised as Django's OperationalError (the writer then tries once more on a
    new connection, and spools the trace if that fails too); a ROLLBACK that
    fails as well closes the connection, which loses the transaction."""
    import sqlite3

    from django.db import OperationalError, connection

    if connection.vendor != "sqlite":
        pytest.skip("SQLite's path")
    connection.ensure_connection()
    raw = connection.connection
    failing = connection.connection = _FailingConnection(raw, rollback_fails=rollback_fails)
    try:
        with pytest.raises(OperationalError, match="disk I/O error"):
            services.record_requests([_record("lost")], notify=False)
    finally:
        if connection.connection is failing:
            connection.connection = raw
    if rollback_fails:
        assert connection.connection is None  # closed: the next write opens a new one
        with pytest.raises(sqlite3.ProgrammingError):
            raw.cursor()  # the driver's connection is closed, its transaction with it
    else:
        assert failing.rolled_back and not raw.in_transaction
    assert _stored() == (0, 0, 0)
    services.record_requests([_record("next")], notify=False)
    assert _stored() == (1, 3, 2)


@pytest.mark.django_db(transaction=True)
def test_the_writer_writes_once_on_a_new_connection_after_a_failed_commit(monkeypatch):
    """The writer's batch whose COMMIT failed is written once more on a new
    connection: once, not twice (the first was rolled back), and not spooled."""
    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip("SQLite's path")

    def fail_once():
        connection.ensure_connection()
        connection.connection = _FailingConnection(connection.connection)

    services.submit(fail_once).result(10)
    services.submit_record(_record("retried")).result(10)
    assert _stored() == (1, 3, 2) and len(services.spool) == 0
    services.close_writer_connection()


@pytest.mark.parametrize("model", [Trace, Span])
def test_adapted_values_are_what_the_fields_make_of_them(model, db):
    """The writer adapts a datetime and a JSON value with the connection's own
    functions, not through the field (trace_writer._adapter): the parameters are
    those the field's get_db_prep_save makes, on either database."""
    from datetime import timezone

    from django.db import connection

    from ledger.spend.trace_writer import _adapter

    datetimes = [T0, T0.astimezone(timezone(timedelta(hours=5, minutes=30))), datetime(2026, 1, 1, tzinfo=UTC), None]
    documents = [None, {}, [], {"a": [1, "é ✓", None, 2.5, True]}, "text", 0, 1.5, False]
    for field in model._meta.concrete_fields:
        kind = field.get_internal_type()
        if kind not in ("DateTimeField", "JSONField"):
            continue
        adapt = _adapter(field)
        for value in datetimes if kind == "DateTimeField" else documents:
            ours, djangos = adapt(value, connection), field.get_db_prep_save(value, connection)
            assert _comparable(ours) == _comparable(djangos), (field.name, value)


def _comparable(value):
    """psycopg's Jsonb wrapper has no equality: its type, object and text."""
    if hasattr(value, "obj") and hasattr(value, "dumps"):
        return type(value), value.obj, value.dumps(value.obj)
    return type(value), value
