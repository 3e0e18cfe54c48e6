"""Writes to the ledger, and passthru's one entry into it: what the /v1
surface records (`submit_record`, `record_request`), the keys it checks and
makes, the providers it lists, and what the daily cap reads of the spool.
pyproject.toml's import-linter contract keeps passthru from the rest
(`ledger.models`, the spool, the trace writer)."""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from datetime import date

from django.db import (
    DEFAULT_DB_ALIAS,
    DatabaseError,
    InterfaceError,
    InternalError,
    OperationalError,
    ProgrammingError,
    connection,
    connections,
    transaction,
)

from kernel.dbwriter import close_writer_connection, sqlite_transaction, submit, write_turn
from ledger.models import SpendDaily, Trace
from ledger.spend import partitions, retention
from ledger.spend.keys import Active, KeyNameTaken, active_keys, listed, revoke, store_key
from ledger.spend.records import TraceRecord
from ledger.spend.selectors import owns, recent_providers, response_key, utc_today
from ledger.spend.spool import RETRY_SECONDS, spool
from ledger.spend.trace_writer import insert_traces, one_statement_each

__all__ = [  # the writer's own names, re-exported: callers know this module only
    "close_writer_connection", "submit", "write_turn", "record_request", "record_requests", "submit_record",
    "arecord_request", "add_observer", "remove_observer", "WriterObserver", "NotRecorded", "recover",
    # what passthru reads and keeps (below, and re-exported from keys and selectors)
    "Active", "KeyNameTaken", "active_keys", "listed", "revoke", "store_key", "recent_providers", "utc_today",
    "owns", "response_key",
    "MAX_MODEL_CHARS", "spooled_spend", "spool_nearly_full", "spool_problem",
]

log = logging.getLogger(__name__)


def record_request(trace: TraceRecord) -> Trace:
    """Write one request's trace, its spans and its spend in one transaction.

    Spend grows by one call per upstream call (a span with a provider); the
    upsert is a single statement, so no increment is lost between processes.
    (The chat route's writes go through record_requests, which skips reading
    the row back.)"""
    return Trace.objects.get(pk=record_requests([trace])[0])


def record_requests(traces: Sequence[TraceRecord], *, notify: bool = True) -> list[int]:
    """record_request for several requests, in one transaction. With `notify`,
    the observers hear of the traces once they are committed."""
    # This thread's connection, looked up once and handed down: each attribute
    # read through `django.db.connection` looks it up again, ~17,000
    # instructions in a thread without an event loop (asgiref's Local asks
    # asyncio for the running loop, which raises). The writer made 16 such
    # reads a plain call, ~0.23 M of its 4.3 M instructions.
    conn = connections[DEFAULT_DB_ALIAS]
    if conn.in_atomic_block:
        # Inside the caller's transaction (a test's, a script's): a savepoint of it.
        with transaction.atomic():
            ids = insert_traces(traces, conn)
            if notify and _observers:
                transaction.on_commit(lambda: notify_committed(traces))
        return ids
    if len(traces) == 1 and one_statement_each(traces, conn):
        # One statement (ledger/spend/trace_writer.py), committed on its own:
        # BEGIN and COMMIT would be two more round trips to the server.
        ids = insert_traces(traces, conn)
    elif conn.vendor == "sqlite":
        with sqlite_transaction(conn):  # BEGIN and COMMIT on the driver's connection (kernel/dbwriter.py)
            ids = insert_traces(traces, conn)
    else:
        with transaction.atomic():  # PostgreSQL's batch: one transaction for all its traces
            ids = insert_traces(traces, conn)
    if notify and _observers:
        notify_committed(traces)
    return ids


# --- Observers of the writer ---------------------------------------------------
# Metrics and trace export (observability/) register here at start-up; the
# ledger imports nothing of theirs. They run on the writer thread after the
# callers have their answer, so they must be quick and must not raise (a
# failure is logged and ignored: the rows are committed whatever they do).


class WriterObserver:
    def committed(self, traces: Sequence[TraceRecord]) -> None:
        """`traces` are committed (each exactly once)."""

    def batch_written(self, traces: int, seconds: float, failed: int, waiting: int) -> None:
        """One group commit took `seconds`; `failed` traces could not be
        written; `waiting` traces are queued behind it."""

    def spooled(self, traces: int, held: int) -> None:
        """`traces` went to the spool (the database did not answer); it holds `held`."""

    def replayed(self, traces: int, seconds: float, held: int) -> None:
        """`traces` were written from the spool in `seconds`; `held` are left."""

    def spool_full(self, traces: int) -> None:
        """`traces` are lost: the database did not answer and the spool could not keep them."""

    def refusals_counted(self, traces: int) -> None:
        """`traces` of refused calls were counted, not kept: the spool kept its room for calls admitted."""


_observers: list[WriterObserver] = []


def add_observer(observer: WriterObserver) -> None:
    if observer not in _observers:
        _observers.append(observer)


def remove_observer(observer: WriterObserver) -> None:
    if observer in _observers:
        _observers.remove(observer)


def _tell(call: Callable[[WriterObserver], None]) -> None:
    for observer in list(_observers):
        try:
            call(observer)
        except Exception:
            log.exception("ledger observer %r failed", observer)


def notify_committed(traces: Sequence[TraceRecord]) -> None:
    if traces:
        _tell(lambda o: o.committed(traces))


# Traces waiting for the writer. Under load, requests finish faster than one
# transaction each can commit; the writer takes all that are waiting into one
# transaction (group commit), and each caller still waits for its own commit.
_waiting: deque[tuple[TraceRecord, concurrent.futures.Future[None]]] = deque()
MAX_BATCH = 200


class NotRecorded(Exception):
    """The database did not take the trace and the spool could not keep it (full)."""


# The database did not take the record: it goes to the spool. Not only "no
# answer" (OperationalError, InterfaceError): behind a pooler in transaction
# mode with prepared statements on, a statement prepared on one server
# connection is missing on the next (ProgrammingError; docs/scaling.md), and an
# InternalError is the server's. Only a value of the record's own that the
# database refuses (DataError, IntegrityError) is the record's: retrying would
# not help, so it is reported to its caller and not spooled.
_DB_DOWN = (OperationalError, InterfaceError, ProgrammingError, InternalError)
_SPOOLED = "spooled"


def _close_connection() -> None:
    try:
        connection.close()  # perhaps a dead connection: the next write opens a new one
    except DatabaseError:
        pass


def _commit(traces: list[TraceRecord]) -> list[BaseException | str | None]:
    """Write `traces`; for each: None (committed), _SPOOLED, or what lost it."""
    if len(spool) and not _replay():
        return _to_spool(traces)  # in order: the spool's records go first
    for _ in range(2):
        try:
            record_requests(traces, notify=False)
            return [None] * len(traces)
        except _DB_DOWN:
            _close_connection()  # once more on a new connection (the old one died in a restart); then spool
        except Exception:
            break
    else:
        return _to_spool(traces)
    # One bad record must not sink the others: write them one by one.
    results: list[BaseException | str | None] = []
    for i, trace in enumerate(traces):
        try:
            record_requests([trace], notify=False)
            results.append(None)
        except _DB_DOWN:
            _close_connection()
            return results + _to_spool(traces[i:])
        except Exception as failed:
            results.append(failed)
    return results


def _to_spool(traces: list[TraceRecord]) -> list[BaseException | str | None]:
    counted_before = spool.refusals_counted
    kept = spool.append(traces)
    _retry_later()
    if _observers:
        held, lost, counted = len(spool), len(kept) - sum(kept), spool.refusals_counted - counted_before
        _tell(lambda o: o.spooled(sum(kept) - counted, held))
        if lost:
            _tell(lambda o: o.spool_full(lost))
        if counted:
            _tell(lambda o: o.refusals_counted(counted))
    return [_SPOOLED if ok else NotRecorded("the database did not answer and the ledger's spool is full") for ok in kept]


def _write_skipping_recorded(traces: list[TraceRecord]) -> None:
    """Replay: write the records not in the ledger yet (by request id), in one
    transaction; a record the database refuses is dropped, logged."""
    try:
        with write_turn(), transaction.atomic():
            ids = [trace.request_id for trace in traces]
            recorded = set(Trace.objects.filter(request_id__in=ids).values_list("request_id", flat=True))
            fresh = [trace for trace in traces if trace.request_id not in recorded]
            if fresh:
                insert_traces(fresh)
                if _observers:
                    transaction.on_commit(lambda: notify_committed(fresh))
        return
    except _DB_DOWN:
        raise
    except Exception:
        if len(traces) == 1:
            log.exception("ledger spool: a record the database refuses was dropped (%s)", traces[0].request_id)
            return
    for trace in traces:
        _write_skipping_recorded([trace])


def _replay() -> bool:
    """Write what the spool holds (this process's, and journals of processes
    that died); False if the database still does not answer."""
    started = time.perf_counter()
    written = 0

    def write(traces: list[TraceRecord]) -> None:
        nonlocal written
        _write_skipping_recorded(traces)
        written += len(traces)

    try:
        spool.claim_orphans()
        spool.replay(write, MAX_BATCH)
    except _DB_DOWN:
        _close_connection()
        _retry_later()
        return False
    finally:
        if written and _observers:
            seconds, held = time.perf_counter() - started, len(spool)
            _tell(lambda o: o.replayed(written, seconds, held))
    return True


_retry_timer: list[threading.Timer] = []


def _retry_later() -> None:
    """Try the spool again in RETRY_SECONDS (on the writer thread), if nothing else does meanwhile."""
    if _retry_timer and _retry_timer[0].is_alive():
        return
    timer = threading.Timer(RETRY_SECONDS, lambda: submit(_retry))
    timer.daemon = True
    _retry_timer[:] = [timer]
    timer.start()


def _retry() -> None:
    if len(spool):
        _replay()


def recover() -> None:
    """At start-up, on the writer thread: replay the journals of processes
    that died (and this one's, if any), and open this one's journal."""
    spool.open()
    try:
        if spool.has_orphans() or len(spool):
            _replay()
    except OSError:
        log.exception("ledger spool: journals not read")


def _write_waiting() -> None:
    batch: list[tuple[TraceRecord, concurrent.futures.Future[None]]] = []
    while _waiting and len(batch) < MAX_BATCH:
        batch.append(_waiting.popleft())
    if not batch:
        return  # an earlier run took this job's trace
    started = time.perf_counter()
    traces = [trace for trace, _ in batch]
    results = _commit(traces)
    for (_, done), result in zip(batch, results):
        if isinstance(result, BaseException):
            done.set_exception(result)
        else:
            done.set_result(None)  # committed, or safe in the spool
    if _observers:  # after the callers have their answer
        seconds = time.perf_counter() - started
        written = [trace for trace, result in zip(traces, results) if result is None]
        failed = sum(1 for result in results if isinstance(result, BaseException))
        _tell(lambda o: o.batch_written(len(batch), seconds, failed, len(_waiting)))
        notify_committed(written)


def submit_record(trace: TraceRecord) -> concurrent.futures.Future[None]:
    """Queue a trace for the writer; the future resolves when it is committed."""
    done: concurrent.futures.Future[None] = concurrent.futures.Future()
    _waiting.append((trace, done))
    submit(_write_waiting)
    retention.maybe_prune_in_background()
    partitions.maybe_extend_in_background()
    return done


async def arecord_request(trace: TraceRecord) -> None:
    """record_request from async code, awaited so the ledger is exact on return."""
    await asyncio.wrap_future(submit_record(trace))


# --- What passthru reads ---------------------------------------------------------

# The longest model id the ledger keeps (its requested_model columns): a longer
# one is refused at the door (passthru/schemas.py), never cut.
MAX_MODEL_CHARS = min(model._meta.get_field("requested_model").max_length or 0 for model in (SpendDaily, Trace))


def spooled_spend(day: date) -> int:
    """Spend on `day` this process's spool holds, not yet in spend_daily (the daily cap counts it)."""
    return spool.pending_spend(day)


def spool_nearly_full() -> bool:
    """Whether the spool may not keep the records of the calls in flight (the daily cap then refuses calls)."""
    return spool.nearly_full()


def spool_problem() -> str:
    """Why this process's spool cannot keep records ("" if it can): /v1/health and the cap's 503 say it."""
    return spool.problem()
