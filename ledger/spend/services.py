"""Writes to the ledger. `record_request` is the one function passthru calls."""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence

from django.db import InterfaceError, OperationalError, connection, transaction

from ledger.models import Trace
from ledger.spend import retention
from ledger.spend.records import TraceRecord
from ledger.spend.trace_writer import insert_traces, one_statement_each
from ledger.spend.writer import close_writer_connection, submit, write_turn

__all__ = [  # the writer's own names, re-exported: callers know this module only
    "close_writer_connection", "submit", "write_turn", "record_request", "record_requests", "submit_record",
    "arecord_request", "add_observer", "remove_observer", "WriterObserver",
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
    if len(traces) == 1 and one_statement_each(traces) and not connection.in_atomic_block:
        # One statement (ledger/spend/trace_writer.py), committed on its own:
        # BEGIN and COMMIT would be two more round trips to the server.
        ids = insert_traces(traces)
        if notify and _observers:
            notify_committed(traces)
        return ids
    with write_turn(), transaction.atomic():
        ids = insert_traces(traces)
        if notify and _observers:
            transaction.on_commit(lambda: notify_committed(traces))
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


def _write_waiting() -> None:
    batch: list[tuple[TraceRecord, concurrent.futures.Future[None]]] = []
    while _waiting and len(batch) < MAX_BATCH:
        batch.append(_waiting.popleft())
    if not batch:
        return  # an earlier run took this job's trace
    started = time.perf_counter()
    written: list[TraceRecord] = []
    try:
        record_requests([trace for trace, _ in batch], notify=False)
    except Exception as exc:
        if isinstance(exc, (OperationalError, InterfaceError)):
            connection.close()  # perhaps a dead connection: the writes below open a new one
        # One bad record must not sink the others: write them one by one.
        for trace, done in batch:
            try:
                record_requests([trace], notify=False)
            except Exception as failed:
                done.set_exception(failed)
            else:
                written.append(trace)
                done.set_result(None)
    else:
        written = [trace for trace, _ in batch]
        for _, done in batch:
            done.set_result(None)
    if _observers:  # after the callers have their answer
        seconds = time.perf_counter() - started
        _tell(lambda o: o.batch_written(len(batch), seconds, len(batch) - len(written), len(_waiting)))
        notify_committed(written)


def submit_record(trace: TraceRecord) -> concurrent.futures.Future[None]:
    """Queue a trace for the writer; the future resolves when it is committed."""
    done: concurrent.futures.Future[None] = concurrent.futures.Future()
    _waiting.append((trace, done))
    submit(_write_waiting)
    retention.maybe_prune_in_background()
    return done


async def arecord_request(trace: TraceRecord) -> None:
    """record_request from async code, awaited so the ledger is exact on return."""
    await asyncio.wrap_future(submit_record(trace))
