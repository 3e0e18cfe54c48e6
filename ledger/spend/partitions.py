"""Traces and spans in one PostgreSQL partition per UTC day.

At fleet scale the ledger's two big tables grow by a day's calls every day,
and retention deleting 2M traces row by row writes as much WAL as writing them
did. Partitioned by day (declarative range partitioning), retention drops a
whole day's tables, and a report over a date range reads only its days.

- `ledger_trace` is partitioned by `started_at`, `ledger_span` by
  `trace_started_at` (the trace's start, copied into each span), so a span
  always lives in its trace's day, and the two days are dropped together.
- Each day is `ledger_trace_pYYYYMMDD` / `ledger_span_pYYYYMMDD`; a DEFAULT
  partition of each takes a row whose day has no partition yet (a clock far
  off, a partition not made in time), so no write ever fails for want of one.
- PostgreSQL wants the partition key in every unique constraint: the primary
  keys become (id, started_at) and (id, trace_started_at) (ids still come from
  one identity sequence, so they stay unique), and `request_id`'s uniqueness
  becomes (request_id, started_at) (a replayed trace keeps its started_at, so
  the spool's duplicate replay is still refused).
- No foreign key points at the partitioned traces. The benchmark links
  (ledger_benchmarkitemtrace) cannot reference a trace's id alone any more;
  the spans could, as (trace_id, trace_started_at) -> (id, started_at), but
  that check cost PostgreSQL 0.17 ms of CPU per call at 99 days, as much as
  the rest of the trace write (docs/scaling.md, "Traces partitioned by day").
  What the key guarded holds without it: the writer inserts a trace and its
  spans in one statement (or one transaction), the spans' trace_id taken from
  the trace's own insert; retention drops a day's spans with its traces; the
  ORM's delete (admin, retention's row deletes) deletes spans and links first.
  A trace's started_at is never updated.

Migration 0015 converts existing tables (`convert`, one transaction); the
writer and `manage.py trace_partitions` keep MARINA_TRACE_PARTITION_DAYS_AHEAD
days made ahead (`ensure_days_ahead`). SQLite has none of this: its tables are
unchanged and every function here is a no-op there."""
from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from datetime import time as dtime
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from kernel import dbwriter

log = logging.getLogger(__name__)

TRACE, SPAN, LINK = "ledger_trace", "ledger_span", "ledger_benchmarkitemtrace"
_KEY = {TRACE: "started_at", SPAN: "trace_started_at"}
_DAY_NAME = re.compile(r"^ledger_trace_p(\d{8})$")
# pg_advisory_xact_lock key: one server at a time makes or drops partitions.
_LOCK_KEY = 0x6D61_7274  # "mart"
# Making or dropping a partition takes a brief ACCESS EXCLUSIVE lock on the parent,
# queued behind the writers' inserts; past this it gives up (and tries again later)
# rather than hold the writers queued behind it.
LOCK_TIMEOUT = "2s"
# How often each server checks that the days ahead exist.
SERVER_CHECK_SECONDS = 3600.0
# Days further back than this get no partition of their own when converting (their rows
# go to the DEFAULT partition): one stray row from years ago must not make a thousand tables.
CONVERT_MAX_DAYS_BACK = 1000


def is_partitioned() -> bool:
    """Whether this database's traces are partitioned (PostgreSQL, converted)."""
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", [TRACE])
        row = cursor.fetchone()
    return bool(row) and row[0] == "p"


def day_bounds(day: date) -> tuple[datetime, datetime]:
    start = datetime.combine(day, dtime(0), tzinfo=UTC)
    return start, start + timedelta(days=1)


def _name(table: str, day: date) -> str:
    return f"{table}_p{day:%Y%m%d}"


def days() -> list[date]:
    """The days that have partitions, oldest first."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = to_regclass(%s)",
            [TRACE],
        )
        found = [_DAY_NAME.match(name) for (name,) in cursor.fetchall()]
    return sorted(datetime.strptime(m.group(1), "%Y%m%d").date() for m in found if m)


def _lock(cursor: Any) -> None:
    cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
    cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])


def ensure_days(wanted: Iterable[date]) -> list[date]:
    """Make the partitions of `wanted` days that do not exist yet; returns the days made.
    Rows the DEFAULT partition holds for such a day move into it (PostgreSQL refuses
    a partition whose rows sit in DEFAULT)."""
    if not is_partitioned():
        return []
    made: list[date] = []
    with transaction.atomic(), connection.cursor() as cursor:
        _lock(cursor)
        have = set(days())
        for day in sorted(set(wanted) - have):
            _create_day(cursor, day)
            made.append(day)
    return made


def _create_day(cursor: Any, day: date) -> None:
    lo, hi = day_bounds(day)
    moved = []
    for table in (TRACE, SPAN):
        key = _KEY[table]
        cursor.execute(f"SELECT 1 FROM {table}_default WHERE {key} >= %s AND {key} < %s LIMIT 1", [lo, hi])
        if cursor.fetchone():
            holding = f"_moving_{table}"
            cursor.execute(f"CREATE TEMP TABLE {holding} (LIKE {table}_default) ON COMMIT DROP")
            cursor.execute(
                f"WITH d AS (DELETE FROM {table}_default WHERE {key} >= %s AND {key} < %s RETURNING *) "
                f"INSERT INTO {holding} SELECT * FROM d",
                [lo, hi],
            )
            moved.append((table, holding))
    for table in (TRACE, SPAN):
        cursor.execute(f"CREATE TABLE {_name(table, day)} PARTITION OF {table} FOR VALUES FROM (%s) TO (%s)", [lo, hi])
    for table, holding in moved:
        cursor.execute(f"INSERT INTO {table} SELECT * FROM {holding}")
        cursor.execute(f"DROP TABLE {holding}")


def ensure_days_ahead(today: date | None = None) -> list[date]:
    """Yesterday (a late write near midnight), today and the configured days ahead."""
    today = today or datetime.now(UTC).date()
    ahead = settings.MARINA_TRACE_PARTITION_DAYS_AHEAD
    return ensure_days(today + timedelta(days=n) for n in range(-1, ahead + 1))


@dataclass
class Dropped:
    days: list[date] = field(default_factory=list)
    traces: int = 0
    spans: int = 0
    links: int = 0


def drop_days_before(before: datetime) -> Dropped:
    """Drop the partitions of every day that ends at or before `before` (with the
    links to their traces), each day in its own short transaction."""
    dropped = Dropped()
    if not is_partitioned():
        return dropped
    for day in days():
        if day_bounds(day)[1] > before:
            break
        with transaction.atomic(), connection.cursor() as cursor:
            trace_table, span_table = _name(TRACE, day), _name(SPAN, day)
            cursor.execute(f"SELECT count(*) FROM {trace_table}")
            traces = cursor.fetchone()[0]
            cursor.execute(f"SELECT count(*) FROM {span_table}")
            spans = cursor.fetchone()[0]
            _lock(cursor)
            cursor.execute(f"DELETE FROM {LINK} WHERE trace_id IN (SELECT id FROM {trace_table})")
            links = cursor.rowcount
            cursor.execute(f"DROP TABLE {span_table}, {trace_table}")
        dropped.days.append(day)
        dropped.traces += traces
        dropped.spans += spans
        dropped.links += links
    return dropped


@dataclass
class DayRow:
    day: date | None  # None: the DEFAULT partition
    traces: int  # PostgreSQL's estimate (pg_class.reltuples), exact after ANALYZE
    bytes: int  # trace and span partitions with their indexes


def listing() -> list[DayRow]:
    """Every partition (the DEFAULT one last) with its estimated rows and size."""
    rows: list[DayRow] = []
    with connection.cursor() as cursor:
        for day in [*days(), None]:
            suffix = "default" if day is None else f"p{day:%Y%m%d}"
            cursor.execute(
                "SELECT greatest(c.reltuples, 0)::bigint, pg_total_relation_size(c.oid) "
                "+ pg_total_relation_size(to_regclass(%s)) FROM pg_class c WHERE c.oid = to_regclass(%s)",
                [f"{SPAN}_{suffix}", f"{TRACE}_{suffix}"],
            )
            traces, size = cursor.fetchone()
            rows.append(DayRow(day, traces, size))
    return rows


# --- Converting existing tables (migration 0015, `manage.py trace_partitions --convert`) ---


@dataclass
class Converted:
    traces: int
    spans: int
    days: int
    seconds: float


def _indexes(cursor: Any, table: str) -> list[str]:
    """CREATE INDEX statements of `table`'s plain indexes (constraints are made apart)."""
    cursor.execute(
        "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i "
        "WHERE i.indrelid = to_regclass(%s) AND NOT EXISTS "
        "(SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)",
        [table],
    )
    return [row[0] for row in cursor.fetchall()]


def _constraints(cursor: Any, table: str) -> list[str]:
    """ALTER TABLE statements that make `table`'s keys again under their own names,
    each unique key with the partition key added (PostgreSQL requires it). The
    span's foreign key to its trace is not made again (the module's docstring)."""
    cursor.execute(
        "SELECT c.conname, c.contype, array_agg(a.attname ORDER BY k.n) FROM pg_constraint c "
        "CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, n) "
        "JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum "
        "WHERE c.conrelid = to_regclass(%s) AND c.contype IN ('p', 'u') GROUP BY c.conname, c.contype "
        "ORDER BY c.conname",
        [table],
    )
    key = _KEY[table]
    statements = []
    for name, kind, columns in cursor.fetchall():
        keyed = ", ".join([*columns, key] if key not in columns else columns)
        statements.append(
            f"ALTER TABLE {table} ADD CONSTRAINT {name} {'PRIMARY KEY' if kind == 'p' else 'UNIQUE'} ({keyed})"
        )
    return statements


def convert() -> Converted | None:
    """Turn the unpartitioned ledger_trace and ledger_span into partitioned
    tables holding the same rows, ids, index names and sequences, in the
    caller's transaction (the migration's). None where there is nothing to do."""
    if connection.vendor != "postgresql" or is_partitioned():
        return None
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {TRACE}, {SPAN}, {LINK} IN ACCESS EXCLUSIVE MODE")
        indexes = {table: _indexes(cursor, table) for table in (TRACE, SPAN)}
        constraints = {table: _constraints(cursor, table) for table in (TRACE, SPAN)}
        for table in (TRACE, SPAN):
            old = f"{table}_unpartitioned"
            cursor.execute(f"ALTER TABLE {table} RENAME TO {old}")
            cursor.execute(f"ALTER SEQUENCE IF EXISTS {table}_id_seq RENAME TO {old}_id_seq")
            cursor.execute(
                f"CREATE TABLE {table} (LIKE {old} INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING STORAGE) "
                f"PARTITION BY RANGE ({_KEY[table]})"
            )
            cursor.execute(f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT")
        cursor.execute(
            f"SELECT DISTINCT (started_at AT TIME ZONE 'UTC')::date FROM {TRACE}_unpartitioned WHERE started_at >= %s",
            [datetime.now(UTC) - timedelta(days=CONVERT_MAX_DAYS_BACK)],
        )
        today = datetime.now(UTC).date()
        wanted = {row[0] for row in cursor.fetchall()}
        wanted |= {today + timedelta(days=n) for n in range(-1, settings.MARINA_TRACE_PARTITION_DAYS_AHEAD + 1)}
        for day in sorted(wanted):
            lo, hi = day_bounds(day)
            for table in (TRACE, SPAN):
                cursor.execute(
                    f"CREATE TABLE {_name(table, day)} PARTITION OF {table} FOR VALUES FROM (%s) TO (%s)", [lo, hi]
                )
        # The copy, before any index exists (building each index once is faster than maintaining it).
        cursor.execute(f"INSERT INTO {TRACE} SELECT * FROM {TRACE}_unpartitioned")
        traces = cursor.rowcount
        cursor.execute(
            "SELECT quote_ident(attname) FROM pg_attribute "
            "WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            [SPAN],
        )
        columns = [row[0] for row in cursor.fetchall()]
        # Each span takes its trace's started_at (the column the old table had was only a placeholder).
        picked = ["t.started_at" if c == "trace_started_at" else f"s.{c}" for c in columns]
        cursor.execute(
            f"INSERT INTO {SPAN} ({', '.join(columns)}) SELECT {', '.join(picked)} FROM {SPAN}_unpartitioned s "
            f"JOIN {TRACE}_unpartitioned t ON t.id = s.trace_id"
        )
        spans = cursor.rowcount
        # The spans' and the links' foreign keys go with the old tables (CASCADE); their
        # columns and indexes stay.
        cursor.execute(f"DROP TABLE {SPAN}_unpartitioned, {TRACE}_unpartitioned CASCADE")
        for table in (TRACE, SPAN):
            cursor.execute(
                f"SELECT setval(pg_get_serial_sequence(%s, 'id'), COALESCE((SELECT max(id) FROM {table}), 0) + 1, false)",
                [table],
            )
        for table in (TRACE, SPAN):
            for statement in constraints[table]:
                cursor.execute(statement)
        for table in (TRACE, SPAN):
            for statement in indexes[table]:
                cursor.execute(statement)
            cursor.execute(f"ANALYZE {table}")
    return Converted(traces, spans, len(wanted), time.perf_counter() - started)


# --- Inside each server ------------------------------------------------------------

_last_check: float | None = None  # time.monotonic() of this process's last check


def maybe_extend_in_background() -> None:
    """Called per trace queued for the writer: once an hour, on the writer's
    thread, make sure the days ahead have their partitions (nothing on SQLite,
    nor on a PostgreSQL whose tables were not converted)."""
    global _last_check
    if not settings.MARINA_TRACE_PARTITIONS:
        return
    now = time.monotonic()
    if _last_check is not None and now - _last_check < SERVER_CHECK_SECONDS:
        return
    _last_check = now
    dbwriter.submit(_extend_step)


def _extend_step() -> None:
    if connection.vendor != "postgresql":
        return
    try:
        made = ensure_days_ahead()
    except Exception:  # a lock not had in time, a database away: the next hour tries again
        log.exception("making the trace partitions ahead failed")
        return
    if made:
        log.info("made trace partitions for %s", ", ".join(f"{d:%Y-%m-%d}" for d in made))
