"""The ledger's spool: what the database could not take, kept on local disk
until it can.

A trace (with its spans and spend) whose write fails because the database
does not answer (PostgreSQL gone, SQLite's disk full or locked past its
timeout) is appended to this process's journal, a file of JSON lines, and
the caller is told it is recorded once the line is on disk (one fdatasync
per group of records, as the database's commit is one per group). The
journal is replayed in order when the database answers again: before the
next write (so order is kept), and every RETRY_SECONDS while it holds
anything. Replay is idempotent: Trace.request_id is unique, and a record
whose request id is already in the ledger is skipped with its spend (its
first write committed, then the connection died before it said so), in the
same transaction as the ones written. So a record is in the ledger once,
whatever the order of crashes.

Each process writes its own journal and holds an flock on it for its life.
A journal whose lock is free belongs to a process that died (kill -9, OOM):
the next process to look (at its first write, and whenever it replays)
claims it with the same lock and replays it too; a process killed during a
replay leaves the journal for the next, which skips what was written.

Disk. The journal keeps RESERVE_BYTES allocated ahead of its end
(posix_fallocate): on a disk that fills up, the next records still have
room. It is bounded by MARINA_SPOOL_MAX_BYTES: past it, a record is lost as
it was before the spool (logged, and counted by the writer's observers:
marina_ledger_spool_full_total). The daily cap counts the spend the
spool holds (`pending_spend`), as if it were in spend_daily.

The last HEADROOM_BYTES are the calls already admitted: the cap refuses new
calls once less is left (`nearly_full`), and a record of a call that reached
no provider (a refusal: the cap's own 503s, a 401, a 400) is journaled only
while it leaves that room whole. Past it a refusal is counted, not journaled
(`refusals_counted`, marina_ledger_refusals_counted_total): 469 refusals once
filled the room that six answered streams needed, and four were lost.

Journals are kept per database (a hash of its vendor, host, port and name in
the directory's name), so a server pointed at another database never
replays into it what was meant for the first."""
from __future__ import annotations

import dataclasses
import errno
import fcntl
import hashlib
import json
import logging
import os
import secrets
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import date, datetime
from pathlib import Path

import orjson
from django.conf import settings
from django.db import connection

from ledger.spend.records import SpanRecord, TraceRecord

log = logging.getLogger(__name__)

RESERVE_BYTES = 4 << 20  # allocated ahead of the journal's end (~2,000 traces without bodies)
HEADROOM_BYTES = 256 << 10  # with less room than this left, the daily cap refuses new calls (~150 traces in flight fit)
# The least MARINA_SPOOL_MAX_BYTES that serves a call: the headroom, and room
# for records before it (below it every call would be refused at once;
# marina/settings.py refuses it at start-up).
MIN_MAX_BYTES = HEADROOM_BYTES + (32 << 10)
RETRY_SECONDS = 1.0  # how often a spool that holds records tries the database again
SUFFIX = ".journal"


# --- Records as JSON lines ------------------------------------------------------
def dumps(trace: TraceRecord) -> bytes:
    """One JSON line. Control characters are escaped (never a raw NUL: a
    journal ends at its first NUL, the space allocated ahead)."""
    try:
        return orjson.dumps(trace, option=orjson.OPT_APPEND_NEWLINE)  # dataclasses and datetimes natively, ~50x asdict
    except TypeError:  # what orjson refuses (integers beyond 64 bits, lone surrogates in a traced body)
        pass
    values = dataclasses.asdict(trace)
    values["started_at"] = trace.started_at.isoformat()
    for span in values["spans"]:
        span["started_at"] = span["started_at"].isoformat()
    return json.dumps(values, separators=(",", ":"), ensure_ascii=True).encode() + b"\n"


def loads(line: bytes) -> TraceRecord:
    try:
        values = orjson.loads(line)
    except orjson.JSONDecodeError:
        values = json.loads(line)  # what dumps wrote through json (lone surrogates)
    spans = [SpanRecord(**{**s, "started_at": datetime.fromisoformat(s["started_at"])}) for s in values.pop("spans")]
    return TraceRecord(**{**values, "started_at": datetime.fromisoformat(values["started_at"]), "spans": spans})


def _admitted(trace: TraceRecord) -> bool:
    """Whether the record is of a call that reached a provider (else a refusal)."""
    return any(span.is_upstream_call for span in trace.spans)


def _spend_by_day(trace: TraceRecord) -> Iterator[tuple[date, int]]:
    for span in trace.spans:
        if span.is_upstream_call and span.cost_nanousd:
            yield span.started_at.date(), span.cost_nanousd


def unwritable(directory: Path) -> str:
    """Why a spool could not be kept under `directory` ("" if it can): made if
    missing, and a file created, written, synced and removed in it. gunicorn's
    master asks at start-up (gunicorn.conf.py), so that a spool that cannot
    be written stops the server with one line instead of refusing every call."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".probe-{os.getpid()}-{secrets.token_hex(4)}"
        fd = os.open(probe, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, b"{}\n")
            os.fdatasync(fd)
        finally:
            os.close(fd)
            probe.unlink()
    except OSError as exc:
        return f"MARINA_SPOOL_DIR={directory} cannot be written ({exc.strerror or exc})"
    return ""


# --- Journals -------------------------------------------------------------------
class Journal:
    """One journal file, open and locked: this process's, or a dead one's claimed."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd
        self.read = 0  # replayed up to here
        self.end = 0  # records end here (then zeros: allocated ahead, or nothing)
        self.allocated: int | None = 0  # None: the file system cannot allocate ahead
        self.pending: list[tuple[int, TraceRecord]] = []  # claimed journals: (end offset, record), read at claim

    def scan(self) -> list[tuple[int, TraceRecord]]:
        """The records from `read` on, each with the offset after it."""
        found: list[tuple[int, TraceRecord]] = []
        offset = self.read
        with open(self.fd, "rb", closefd=False) as f:
            f.seek(offset)
            for line in f:
                if not line.endswith(b"\n") or line.startswith(b"\0"):
                    break  # the end, or a line cut short by a crash: never acknowledged
                offset += len(line)
                try:
                    found.append((offset, loads(line)))
                except (ValueError, TypeError):
                    log.error("ledger spool %s: unreadable record at byte %d skipped", self.path, offset - len(line))
        self.end = offset
        return found


class Spool:
    """This process's spool (one per process; used from the ledger's writer thread only,
    but for `pending_spend`, which the cap's thread reads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards the figures below (read by other threads)
        self._spend: dict[date, int] = {}
        self._records = 0
        self._own: Journal | None = None
        self._own_records: list[tuple[int, TraceRecord]] = []
        self._claimed: list[Journal] = []
        self._looked_at: float = 0.0
        self._pid = 0
        self._broken = False  # the journal could not be opened, or its last append failed
        self._broken_why = ""
        self.full_logged = False
        self.refusals_counted = 0  # refusals counted, not journaled, since start (room kept for admitted calls)
        self.refusals_logged = False

    # -- figures
    def __len__(self) -> int:
        return self._records

    def pending_spend(self, day: date) -> int:
        """Spend on `day` held here, not yet in spend_daily (the daily cap counts it)."""
        with self._lock:
            return self._spend.get(day, 0)

    def nearly_full(self) -> bool:
        """Whether the spool may not keep the records of the calls in flight:
        the daily cap then refuses new calls (passthru/spendcap.py)."""
        own = self._own
        if own is None or self._broken:
            return self._broken
        return self._room(own) - own.end < HEADROOM_BYTES

    def problem(self) -> str:
        """Why the spool cannot keep records ("" if it can): for /v1/health and the cap's 503."""
        return self._broken_why if self._broken else ""

    @staticmethod
    def _room(journal: Journal) -> int:
        """Where the journal must end: its bound, or what is allocated on a full disk."""
        limit = settings.MARINA_SPOOL_MAX_BYTES
        return limit if journal.allocated is None else min(limit, journal.allocated)

    def _count(self, records: Sequence[TraceRecord], sign: int) -> None:
        with self._lock:
            self._records += sign * len(records)
            for trace in records:
                for day, cost in _spend_by_day(trace):
                    self._spend[day] = self._spend.get(day, 0) + sign * cost
                    if not self._spend[day]:
                        del self._spend[day]

    # -- where
    @staticmethod
    def directory() -> Path:
        db = connection.settings_dict
        identity = f"{connection.vendor}\0{db.get('HOST') or ''}\0{db.get('PORT') or ''}\0{db.get('NAME')}"
        return Path(settings.MARINA_SPOOL_DIR) / hashlib.sha256(identity.encode()).hexdigest()[:16]

    def open(self) -> None:
        """Open this process's journal now, its space allocated (a worker at
        start: a disk that fills up later leaves it room)."""
        try:
            self._journal()
        except OSError as exc:
            self._break(exc)
            log.error("ledger spool: no journal (%s): traces the database cannot take will be lost", exc)

    def _break(self, exc: OSError) -> None:
        self._broken = True
        self._broken_why = f"MARINA_SPOOL_DIR={settings.MARINA_SPOOL_DIR} cannot be written ({exc.strerror or exc})"

    def _journal(self) -> Journal:
        if self._own is not None and self._pid != os.getpid():  # forked: the parent's journal is the parent's
            self._own, self._own_records, self._claimed = None, [], []
            with self._lock:
                self._spend, self._records = {}, 0
        if self._own is None:
            folder = self.directory()
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{os.getpid()}-{secrets.token_hex(4)}{SUFFIX}"
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._own, self._pid = Journal(path, fd), os.getpid()
            self._allocate(self._own)
        return self._own

    @staticmethod
    def _allocate(journal: Journal) -> None:
        """Keep RESERVE_BYTES allocated past the end (a disk that fills up leaves the next records room)."""
        if journal.allocated is None or journal.allocated - journal.end >= RESERVE_BYTES // 2:
            return
        want = journal.end + RESERVE_BYTES
        try:
            os.posix_fallocate(journal.fd, journal.allocated, want - journal.allocated)
        except OSError as exc:
            if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL):
                journal.allocated = None  # this file system cannot: the journal grows as it is written
            elif exc.errno != errno.ENOSPC:  # the disk is full: the records go into what is allocated
                raise
        else:
            journal.allocated = want

    # -- append
    def append(self, traces: Sequence[TraceRecord]) -> list[bool]:
        """Append records to this process's journal and sync them; for each,
        whether it is kept (a refusal counted, not journaled, is kept as a count)."""
        journaled = [False] * len(traces)
        counted = [False] * len(traces)
        try:
            journal = self._journal()
            limit = settings.MARINA_SPOOL_MAX_BYTES
            for i, trace in enumerate(traces):
                line = dumps(trace)
                if not _admitted(trace) and self._room(journal) - journal.end - len(line) < HEADROOM_BYTES:
                    counted[i] = True  # a refusal never takes an admitted call's room
                    continue
                if journal.end + len(line) > limit:
                    self._full(f"the journal reached MARINA_SPOOL_MAX_BYTES={limit}")
                    break
                if os.pwrite(journal.fd, line, journal.end) != len(line):
                    raise OSError(errno.ENOSPC, "short write")
                journal.end += len(line)
                if journal.allocated is not None:
                    journal.allocated = max(journal.allocated, journal.end)
                self._own_records.append((journal.end, trace))
                journaled[i] = True
            if any(journaled):
                os.fdatasync(journal.fd)
            self._allocate(journal)
        except OSError as exc:
            # Not on disk, or not known to be: the callers are told it is lost (logged by them).
            self._full(f"{exc.strerror or exc}")
            self._broken_why = f"MARINA_SPOOL_DIR={settings.MARINA_SPOOL_DIR} cannot be written ({exc.strerror or exc})"
            if any(journaled) and not self._synced_after_error(journal if self._own else None):
                journaled = [False] * len(traces)
        written = [trace for trace, ok in zip(traces, journaled) if ok]
        self._count(written, +1)
        kept = [a or b for a, b in zip(journaled, counted)]
        self._broken = not all(kept)
        if written:
            self.full_logged = False
        if any(counted):
            self._count_refusals(sum(counted))
        return kept

    def _count_refusals(self, counted: int) -> None:
        if not self.refusals_logged:  # once a time the spool runs short
            log.warning(
                "ledger spool: short of room, refusals are counted, not journaled (room kept for calls admitted); %d so far",
                self.refusals_counted + counted,
            )
            self.refusals_logged = True
        self.refusals_counted += counted

    @staticmethod
    def _synced_after_error(journal: Journal | None) -> bool:
        if journal is None:
            return False
        try:
            os.fdatasync(journal.fd)
        except OSError:
            return False
        return True

    def _full(self, why: str) -> None:
        self._broken_why = f"the ledger's spool is full: {why}"
        if not self.full_logged:
            self.full_logged = True
            log.error("ledger spool full: %s; traces that cannot be written are now lost (%d held)", why, self._records)

    # -- replay
    def claim_orphans(self) -> None:
        """Claim the journals of processes that died (their lock is free)."""
        folder = self.directory()
        if not folder.is_dir():
            return
        own = self._own.path if self._own else None
        claimed = {j.path for j in self._claimed}
        for path in sorted(folder.glob(f"*{SUFFIX}")):
            if path == own or path in claimed:
                continue
            try:
                fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:
                continue  # replayed and removed meanwhile
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)  # its process lives
                continue
            if os.fstat(fd).st_nlink == 0:  # removed between open and lock: replayed
                os.close(fd)
                continue
            journal = Journal(path, fd)
            journal.pending = journal.scan()
            self._claimed.append(journal)
            self._count([trace for _, trace in journal.pending], +1)
            if journal.pending:  # an empty journal (a clean stop) is claimed and removed without a word
                log.warning("ledger spool: replaying %d records left by a process that ended (%s)", len(journal.pending), path.name)

    def replay(self, write: Callable[[list[TraceRecord]], None], batch: int) -> int:
        """Write what the spool holds, oldest journals first, `batch` records a
        transaction (`write` must skip records already in the ledger). Stops
        at the first database error (raised). Returns the records written."""
        done = 0
        for journal in list(self._claimed):
            while journal.pending:
                chunk = journal.pending[:batch]
                write([trace for _, trace in chunk])
                del journal.pending[: len(chunk)]
                journal.read = chunk[-1][0]
                self._count([trace for _, trace in chunk], -1)
                done += len(chunk)
            os.unlink(journal.path)
            os.close(journal.fd)
            self._claimed.remove(journal)
        own = self._own
        while self._own_records:
            chunk = self._own_records[:batch]
            write([trace for _, trace in chunk])
            del self._own_records[: len(chunk)]
            self._count([trace for _, trace in chunk], -1)
            done += len(chunk)
        if own is not None and own.end:
            # All written: start the journal again (what it held is in the ledger).
            os.ftruncate(own.fd, 0)
            own.read = own.end = 0
            if own.allocated is not None:
                own.allocated = 0
            self._allocate(own)
        self._broken = False
        self.refusals_logged = False
        return done

    def has_orphans(self) -> bool:
        folder = self.directory()
        own = self._own.path if self._own else None
        return folder.is_dir() and any(p != own for p in folder.glob(f"*{SUFFIX}"))


spool = Spool()

