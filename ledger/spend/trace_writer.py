"""The SQL behind ledger.spend.services.record_request: traces, spans and spend for
a batch of requests in one transaction.

On PostgreSQL each request is one prepared statement: the trace, its spans
and its spend upserts in data-modifying CTEs. A lone request (the writer found
no other waiting) commits on its own: one round trip where BEGIN, an INSERT,
two executemany and COMMIT took five, ~0.7 ms less at c=1 with the statement
prepared. A batch (the writer under load) sends its statements in one
pipeline inside its transaction: +20 % calls/s at c=32 against the
executemany batches (docs/performance.md, "The awaited commit on
PostgreSQL"). Same durability: the commit, with the WAL flushed, comes before
the callers hear of it.

Why not the ORM: `Trace.objects.create` + `bulk_create` compile their SQL on
every call, ~0.8 ms of CPU per request on this machine, more than the rest of
the request path together (docs/performance.md). The statements here are
built once per connection vendor from the models' own field lists and each
value is adapted as its field does (`get_db_prep_save`, or the step of it that
does the work: `_adapter`) where the type needs it, so rows are stored exactly
as the ORM stores them (tests/ledger/spend/test_trace_writer.py
reads them back through the ORM on SQLite and PostgreSQL).

With MARINA_TRACE_STORE=otel the spans go to the OpenTelemetry collector
(observability/otel.py, a writer observer: it gets the whole records) and the
database keeps what the ledger itself needs: spend_daily as always; the trace
row, without its body, for its request ids (the spool's replay skips what is
recorded by request_id; item <-> call links match on the conversation identity
and list the trace ids), status, tokens and cost (the links' per-item sums);
and, of the spans, only those `holds_decision` picks, without bodies: one or
two per formation call, none for a plain one, which the links read for the
formations' counters. No other table: the trace row already is the slim row."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import date
from functools import lru_cache
from operator import itemgetter
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, Model

from kernel.formations import holds_decision
from kernel.prepared import native_binding_cursor
from ledger.models import Span, Trace
from ledger.spend.records import SpanRecord, TraceRecord

# One SPEND_UPSERT's parameters: day, key, requested model, provider, upstream model, then the
# calls, errors, unpriced calls, token counts and cost added to the day's row.
SpendRow = tuple[date, str, str, str, str, int, int, int, int, int, int, int, int]
_SPEND_KEY = 5  # the first five are the row's key

# Field types whose Python values the database driver cannot take as they are.
_ADAPTED = {"DateTimeField", "DateField", "TimeField", "JSONField", "DecimalField", "UUIDField", "DurationField"}

_SPEND_COLUMNS = """spend_daily (day, key_name, requested_model, provider, upstream_model, calls, errors,
    unpriced_calls, prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, cost_nanousd)"""
_SPEND_VALUES = "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
_SPEND_ON_CONFLICT = """ON CONFLICT (day, key_name, requested_model, provider, upstream_model) DO UPDATE SET
    calls = spend_daily.calls + excluded.calls,
    errors = spend_daily.errors + excluded.errors,
    unpriced_calls = spend_daily.unpriced_calls + excluded.unpriced_calls,
    prompt_tokens = spend_daily.prompt_tokens + excluded.prompt_tokens,
    completion_tokens = spend_daily.completion_tokens + excluded.completion_tokens,
    cached_tokens = spend_daily.cached_tokens + excluded.cached_tokens,
    reasoning_tokens = spend_daily.reasoning_tokens + excluded.reasoning_tokens,
    cost_nanousd = spend_daily.cost_nanousd + excluded.cost_nanousd"""
SPEND_UPSERT = f"INSERT INTO {_SPEND_COLUMNS}\nVALUES {_SPEND_VALUES}\n{_SPEND_ON_CONFLICT}"


def _column(field: Field[Any, Any]) -> str:
    """A concrete field's column; only fields without one (relations seen from
    the other side) have None, and those are not inserted."""
    if field.column is None:
        raise TypeError(f"{field} has no column")
    return field.column


def _adapter(field: Field[Any, Any]) -> Callable[[Any, BaseDatabaseWrapper], Any]:
    """How a value of `field` becomes the driver's parameter, given the
    connection: the field's `get_db_prep_save`, or for the ledger's two adapted
    types the one step of it that does anything to the values the records hold
    (aware datetimes; JSON or None), the connection's own
    `adapt_datetimefield_value` and `adapt_json_value`. The field's layers
    around them (to_python, the naive-datetime check, expressions) were ~45,000
    instructions of a plain call's trace write (three datetimes, one JSON
    value), on SQLite and PostgreSQL alike. tests/ledger/spend/test_trace_writer.py
    compares the two on both."""
    kind = field.get_internal_type()
    if kind == "DateTimeField":
        return lambda value, conn: conn.ops.adapt_datetimefield_value(value)
    if kind == "JSONField":
        encoder = field.encoder  # type: ignore[attr-defined]
        return lambda value, conn: None if value is None else conn.ops.adapt_json_value(value, encoder)
    return field.get_db_prep_save


class _Insert:
    """One model's INSERT: the SQL (`mark` its placeholder) and a function turning a dict of values into its parameters."""

    def __init__(self, model: type[Model], returning: bool, mark: str) -> None:
        quote = connection.ops.quote_name
        self.fields: list[Field[Any, Any]] = [f for f in model._meta.concrete_fields if not f.primary_key]
        columns = ", ".join(quote(_column(f)) for f in self.fields)
        marks = ", ".join([mark] * len(self.fields))
        self.sql = f"INSERT INTO {quote(model._meta.db_table)} ({columns}) VALUES ({marks})"
        self.returning = returning
        if returning:
            self.sql += f" RETURNING {quote(_column(model._meta.pk))}"
        self.names = [f.attname for f in self.fields]
        self._values = itemgetter(*self.names)
        self._adapters = [(i, _adapter(f)) for i, f in enumerate(self.fields) if f.get_internal_type() in _ADAPTED]

    def params(self, values: dict[str, Any], conn: BaseDatabaseWrapper) -> list[Any]:
        params = list(self._values(values))
        for i, adapt in self._adapters:
            params[i] = adapt(params[i], conn)
        return params


@lru_cache(maxsize=4)
def _statements(vendor: str) -> tuple[_Insert, _Insert, str]:
    """The trace's and the span's INSERT and the spend upsert, with the placeholders
    the cursor of `_cursor` takes: SQLite's own `?`, else `%s`."""
    returning = connection.features.can_return_columns_from_insert
    if vendor == "sqlite":
        return _Insert(Trace, returning, "?"), _Insert(Span, False, "?"), SPEND_UPSERT.replace("%s", "?")
    return _Insert(Trace, returning, "%s"), _Insert(Span, False, "%s"), SPEND_UPSERT


@contextlib.contextmanager
def _cursor(conn: BaseDatabaseWrapper) -> Iterator[Any]:
    """The cursor insert_traces runs its statements on. On SQLite, the driver's
    own: Django's SQLite cursor rewrites every statement's `%s` into `?` with a
    regular expression on each execute, 7 % of a plain call's instructions at
    c=1 for these three statements (docs/performance.md, issue 45); these are
    written with `?` once (`_statements`). Errors are Django's, as from its cursor."""
    if conn.vendor != "sqlite":
        with conn.cursor() as cursor:
            yield cursor
        return
    conn.ensure_connection()
    cursor = conn.connection.cursor()
    try:
        with conn.wrap_database_errors:
            yield cursor
    finally:
        cursor.close()


def storable(value: Any) -> Any:
    """JSON for a trace column: NUL characters replaced (PostgreSQL's jsonb
    cannot hold \\u0000, and one NUL in a traced body would lose the whole
    trace write)."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [storable(v) for v in value]
    return value


def stored_spans(trace: TraceRecord) -> list[SpanRecord]:
    """The spans of `trace` the database keeps: all of them, or with
    MARINA_TRACE_STORE=otel only the formation decisions, without bodies."""
    if settings.MARINA_TRACE_STORE != "otel":
        return trace.spans
    return [replace(s, body=None) for s in trace.spans if holds_decision(s.name, s.detail or {})]


def _trace_values(trace: TraceRecord, upstream: Sequence[SpanRecord]) -> dict[str, Any]:
    costs = [s.cost_nanousd for s in upstream if s.cost_nanousd is not None]
    return {
        "request_id": trace.request_id,
        "client_request_id": trace.client_request_id,
        "started_at": trace.started_at,
        "duration_ms": trace.duration_ms,
        "overhead_ms": trace.overhead_ms,
        "method": trace.method,
        "path": trace.path[:100],
        "key_name": trace.key_name,
        "response_id": trace.response_id[:100],
        "requested_model": trace.requested_model[:200],
        "route": trace.route,
        "formation_label": trace.formation_label[:64],
        "session": trace.session[:128],
        "stream": trace.stream,
        "status": trace.status,
        "http_status": trace.http_status,
        "error_kind": trace.error_kind,
        "error_message": trace.error_message[:500],
        "prompt_tokens": sum(s.prompt_tokens for s in upstream),
        "completion_tokens": sum(s.completion_tokens for s in upstream),
        "cost_nanousd": sum(costs) if costs else None,
        "body": None if trace.body is None or settings.MARINA_TRACE_STORE == "otel" else storable(trace.body),
        "conv_seed": trace.conv_seed,
        "conv_opening": trace.conv_opening[:16],
        "conv_system": trace.conv_system[:16],
    }


def _span_values(trace_id: int, trace: TraceRecord, s: SpanRecord) -> dict[str, Any]:
    return {
        "trace_id": trace_id,
        "trace_started_at": trace.started_at,  # the span's partition on PostgreSQL (ledger/spend/partitions.py)
        "seq": s.seq,
        "parent_seq": s.parent_seq,
        "name": s.name,
        "provider": s.provider,
        "upstream_model": s.upstream_model[:200],
        "status": s.status,
        "http_status": s.http_status,
        "error_kind": s.error_kind,
        "started_at": s.started_at,
        "duration_ms": s.duration_ms,
        "ttft_ms": s.ttft_ms,
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": s.completion_tokens,
        "cached_tokens": s.cached_tokens,
        "reasoning_tokens": s.reasoning_tokens,
        "cost_nanousd": s.cost_nanousd,
        "cost_source": s.cost_source,
        "detail": storable(s.detail) if s.detail else s.detail,
        "body": None if s.body is None else storable(s.body),
    }


# The model ids of spend_daily's row for a call the provider answered 404
# (no such model) and did not charge: one row, not one per id tried (a
# client trying 1,500 random ids made 1,500 rows).
UNKNOWN_MODEL = "other"


def unpriced(span: SpanRecord) -> bool:
    """An answered call nobody could price. A call that failed (the provider's
    500, 429 or 404, no tokens) is counted under errors, not here: one run's
    "106 unpriced calls … lower bound" held about 10 really unpriced."""
    return span.cost_nanousd is None and span.status != "error"


def spend_row(trace: TraceRecord, span: SpanRecord) -> SpendRow:
    requested, upstream = trace.requested_model, span.upstream_model
    if span.http_status == 404 and span.cost_nanousd is None and not (span.prompt_tokens or span.completion_tokens):
        requested = upstream = UNKNOWN_MODEL
    return (
        span.started_at.date(),  # started_at is UTC: Marina runs with TIME_ZONE=UTC
        trace.key_name,
        requested,
        span.provider,
        upstream,
        1,
        0 if span.status == "ok" else 1,
        1 if unpriced(span) else 0,
        span.prompt_tokens,
        span.completion_tokens,
        span.cached_tokens,
        span.reasoning_tokens,
        span.cost_nanousd or 0,
    )


def insert_traces(traces: Sequence[TraceRecord], conn: BaseDatabaseWrapper | None = None) -> list[int]:
    """INSERT the traces, their spans and their spend upserts on `conn` (this
    thread's connection, services.record_requests says why it is handed down);
    returns the traces' ids. The caller holds the transaction (on PostgreSQL, a
    single trace needs none: its one statement is atomic)."""
    if conn is None:
        conn = connections[DEFAULT_DB_ALIAS]
    if one_statement_each(traces, conn):
        conn.ensure_connection()
        with conn.wrap_database_errors:  # Django's exceptions, as from its own cursors
            if len(traces) == 1:
                return [_insert_one_statement(native_binding_cursor(conn.connection), traces[0], conn)]
            # A batch (the writer under load, in one transaction): the same
            # statements, sent together in one pipeline, a cursor each.
            cursors = []
            with conn.connection.pipeline():
                for trace in traces:
                    cursor = native_binding_cursor(conn.connection)
                    _execute_one_statement(cursor, trace, conn)
                    cursors.append(cursor)
            return [cursor.fetchone()[0] for cursor in cursors]
    trace_insert, span_insert, spend_upsert = _statements(conn.vendor)
    ids: list[int] = []
    spans: list[list[Any]] = []
    spend: list[SpendRow] = []
    with _cursor(conn) as cursor:
        for trace in traces:
            upstream = [s for s in trace.spans if s.is_upstream_call]
            cursor.execute(trace_insert.sql, trace_insert.params(_trace_values(trace, upstream), conn))
            trace_id = cursor.fetchone()[0] if trace_insert.returning else cursor.lastrowid
            ids.append(trace_id)
            spans.extend(span_insert.params(_span_values(trace_id, trace, s), conn) for s in stored_spans(trace))
            spend.extend(spend_row(trace, s) for s in upstream)
        if spans:
            cursor.executemany(span_insert.sql, spans)
        if spend:
            cursor.executemany(spend_upsert, spend)
    return ids


# A statement takes at most 65,535 parameters (~20 a span): past this many
# spans (no formation comes near) a trace is written as several statements.
ONE_STATEMENT_MAX_SPANS = 1000


def one_statement_each(traces: Sequence[TraceRecord], conn: BaseDatabaseWrapper) -> bool:
    """Whether insert_traces writes each of `traces` as one statement (PostgreSQL)."""
    return conn.vendor == "postgresql" and all(len(trace.spans) <= ONE_STATEMENT_MAX_SPANS for trace in traces)


def summed_spend(rows: Sequence[SpendRow]) -> list[SpendRow]:
    """One row per spend key, its counts added: one INSERT ... ON CONFLICT may
    not update the same row twice (two calls of one request to one model)."""
    summed: dict[tuple[Any, ...], list[Any]] = {}
    for row in rows:
        key = row[:_SPEND_KEY]
        total = summed.get(key)
        if total is None:
            summed[key] = list(row)
        else:
            for i in range(_SPEND_KEY, len(row)):
                total[i] += row[i]
    return [tuple(values) for values in summed.values()]


@lru_cache(maxsize=64)
def _one_statement(spans: int, spend_rows: int) -> str:
    """PostgreSQL: a trace, `spans` spans and `spend_rows` spend upserts in one
    statement (its SQL made once per shape; psycopg prepares each once per
    connection), with PostgreSQL's own placeholders, $1, $2, ... (the cursor
    of kernel/prepared.py's `native_binding_cursor`)."""
    trace_insert, span_insert, _ = _statements("postgresql")
    parts = [f"t AS ({trace_insert.sql})"]
    if spans:
        # The span's trace is the row inserted above; its other columns are parameters.
        row = "(" + ", ".join("(SELECT id FROM t)" if f.attname == "trace_id" else "%s" for f in span_insert.fields) + ")"
        head = span_insert.sql[: span_insert.sql.index(" VALUES ")]
        parts.append(f"s AS ({head} VALUES {', '.join([row] * spans)})")
    if spend_rows:
        parts.append(f"d AS (INSERT INTO {_SPEND_COLUMNS} VALUES {', '.join([_SPEND_VALUES] * spend_rows)} {_SPEND_ON_CONFLICT})")
    pieces = ("WITH " + ",\n".join(parts) + "\nSELECT id FROM t").split("%s")  # each %s becomes $1, $2, ...
    return "".join(f"{piece}${n}" for n, piece in enumerate(pieces[:-1], 1)) + pieces[-1]


def _insert_one_statement(cursor: Any, trace: TraceRecord, conn: BaseDatabaseWrapper) -> int:
    _execute_one_statement(cursor, trace, conn)
    trace_id: int = cursor.fetchone()[0]
    return trace_id


def _execute_one_statement(cursor: Any, trace: TraceRecord, conn: BaseDatabaseWrapper) -> None:
    trace_insert, span_insert, _ = _statements("postgresql")
    upstream = [s for s in trace.spans if s.is_upstream_call]
    spend = summed_spend([spend_row(trace, s) for s in upstream])
    params = trace_insert.params(_trace_values(trace, upstream), conn)
    trace_id_at = span_insert.names.index("trace_id")  # the statement fills it in
    stored = stored_spans(trace)
    for span in stored:
        span_params = span_insert.params(_span_values(0, trace, span), conn)
        del span_params[trace_id_at]
        params += span_params
    for row in spend:
        params += row
    # Prepared: parsing and planning the CTEs was a third of the statement's time.
    cursor.execute(_one_statement(len(stored), len(spend)), params, prepare=True)
