"""Trace retention: deleting traces (and their spans) older than a cutoff.

Deletes go in small batches, each its own short transaction, oldest first
through the started_at index, so the servers' ledger writers wait at most one
batch (PostgreSQL: not at all, new rows never conflict with old ones; SQLite:
one write lock of a few milliseconds, taken in turn with the writers).
spend_daily and benchmark runs and items are never touched: an item linked to
a pruned trace keeps the figures it copied from it, only the link goes.

Where traces are partitioned by day (PostgreSQL, ledger/spend/partitions.py),
every day wholly before the cutoff is dropped as a table first; only the rows
left before the cutoff (the cutoff's own day, the DEFAULT partition) go in
batches."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction

from kernel import dbwriter
from ledger.models import Span, Trace
from ledger.spend import partitions

log = logging.getLogger(__name__)

BATCH = 2000
# How often each server prunes on its own (with MARINA_TRACE_RETENTION_DAYS set).
SERVER_PRUNE_SECONDS = 3600.0


@dataclass
class Pruned:
    before: datetime
    traces: int = 0
    spans: int = 0
    batches: int = 0
    days_dropped: int = 0  # whole days' partitions dropped (PostgreSQL)
    dry_run: bool = False


def retention_cutoff(now: datetime | None = None) -> datetime | None:
    """now - MARINA_TRACE_RETENTION_DAYS, or None when traces are kept."""
    days = settings.MARINA_TRACE_RETENTION_DAYS
    if days is None:
        return None
    return (now or datetime.now(UTC)) - timedelta(days=days)


def prune_batch(before: datetime, size: int = BATCH) -> tuple[int, int]:
    """Delete up to `size` of the oldest traces started before `before`, with
    their spans and links, in one transaction. Returns (traces, spans)."""
    with dbwriter.write_turn(), transaction.atomic():
        ids = list(
            Trace.objects.filter(started_at__lt=before).order_by("started_at").values_list("pk", flat=True)[:size]
        )
        if not ids:
            return 0, 0
        # Django's collector deletes whatever refers to a trace (spans, item links) first;
        # only the ids are read, never the traces' bodies.
        _, per_model = Trace.objects.filter(pk__in=ids).only("pk").delete()
    return per_model.get(Trace._meta.label, 0), per_model.get(Span._meta.label, 0)


def prune_traces(
    before: datetime, *, size: int = BATCH, dry_run: bool = False, on_batch: Callable[[Pruned], None] | None = None
) -> Pruned:
    """Delete every trace started before `before`, batch by batch (or, with
    dry_run, count what would go)."""
    result = Pruned(before=before, dry_run=dry_run)
    if dry_run:
        old = Trace.objects.filter(started_at__lt=before)
        result.traces = old.count()
        result.spans = Span.objects.filter(trace__started_at__lt=before).count()
        return result
    dropped = partitions.drop_days_before(before)
    result.traces, result.spans, result.days_dropped = dropped.traces, dropped.spans, len(dropped.days)
    while True:
        traces, spans = prune_batch(before, size)
        if not traces:
            return result
        result.traces += traces
        result.spans += spans
        result.batches += 1
        if on_batch:
            on_batch(result)


# --- Pruning inside each server ----------------------------------------------------
# With MARINA_TRACE_RETENTION_DAYS set, the ledger writer thread prunes once an
# hour: one batch per job, the next batch queued behind the traces waiting to be
# written, so a backlog of millions never holds up a request's trace.

_last_prune: float | None = None  # time.monotonic() of this process's last pass


def maybe_prune_in_background() -> None:
    """Called by the ledger writer per write; starts a pruning pass when one is due."""
    global _last_prune
    if settings.MARINA_TRACE_RETENTION_DAYS is None:
        return
    now = time.monotonic()
    if _last_prune is not None and now - _last_prune < SERVER_PRUNE_SECONDS:
        return
    _last_prune = now
    cutoff = retention_cutoff()
    if cutoff is not None:
        dbwriter.submit(_prune_step, cutoff)


def _prune_step(cutoff: datetime, first: bool = True) -> None:
    try:
        if first:
            partitions.drop_days_before(cutoff)
        traces, _ = prune_batch(cutoff, BATCH // 4 if connection.vendor == "sqlite" else BATCH)
    except Exception:  # pruning must never disturb the writer; the next hour tries again
        log.exception("pruning traces before %s failed", cutoff)
        return
    if traces:
        dbwriter.submit(_prune_step, cutoff, False)
