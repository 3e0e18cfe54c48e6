"""The daily dollar cap (MARINA_DAILY_SPEND_CAP_USD), with the calls in
flight counted against it.

Checking only what has been spent lets every call already past the check
finish: 50 concurrent $0.01 calls at $0.32 of a $0.40 cap all went through.
So each upstream call first counts its estimated cost (`estimate_nanousd`:
the prompt's size, the model's price, and `max_tokens` or
MARINA_SPEND_CAP_COMPLETION_TOKENS) against room reserved in the database,
until its spend is recorded (passthru/lifecycle.py `release`s it once the trace is
committed): a call counts as reserved, or as spent, or for a moment as both;
never as neither.

Leases. Each process reserves room for its own calls: one row of
passthru_spendhold per process and day, its *lease* of L nano-dollars.
Locally it keeps U, the estimates of its calls not yet recorded, and B, the
spend recorded by its calls since the lease was last sized. A call starts
without the database when U + e <= L - B (and something is left). Else it
asks the cap thread, which in one transaction serialised across hosts
(PostgreSQL: an advisory transaction lock; SQLite: the ledger's write turn,
an flock taken by every writer of the file, kernel/dbwriter.py) reads
today's spend S (spend_daily) and the other live rows O, takes the asking
calls that fit (S + O + U + e <= cap, and S + O + U < cap; else the 429 with
those figures), and sizes the lease to U + the calls taken + a chunk (B
starts again from 0: S now counts it). So S + O + L <= cap at every sizing,
and real spend stays under the cap but for the estimates' error (what calls
cost beyond their estimate), not for concurrency, on every worker and host.

The chunk (max(8 estimates, 1 % of the cap)) is given only while 3 more
chunks would still be free after it: far from the cap a worker sizes its
lease now and then and serves its calls from memory; near it a lease is
exactly its calls in flight, as fair as a hold per call (a chunk kept by a
busy worker would refuse another worker's call that fits). The row says the
room left, L - B (spend recorded is in S: others must not count it twice):
brought up to date by a ticker every TICK_SECONDS, and at once after a
release when the lease has no chunk. Rows are renewed at least every
RENEW_SECONDS while in use and count for others only while renewed
(LEASE_STALE_SECONDS: a process that died or hangs); a process serves calls
from its lease only within LEASE_VALID_SECONDS of its last write, so its
row is never stale while it does. A lease with no call in flight for
IDLE_SECONDS is given back (its row deleted), as is a worker's at shutdown
(passthru/afterwards.py). Hosts sharing a database need clocks within a few
seconds of each other (NTP): the rows' times are the writers' clocks.

Cost: far from the cap, a lock and a few additions per call, the database
once per chunk and a row update every TICK_SECONDS per worker; near it, a
transaction per call as before. All on a thread of its own with its own
connection, like the rate limiter's; bench/spendcap.py measures it. With the
cap off there is none of it.

A model nobody can price (no entry in genai-prices' tables) is counted at 0:
it runs while something is left, and counts once it has run if the provider
reports a cost (OpenRouter does).

A database that cannot be reached (twice: once more on a new connection)
and a lease that cannot serve the call: the cap cannot say there is room,
so the call is refused, 503 `spend_cap_unavailable` with Retry-After, before
it reaches a provider (a free pass let 200 calls through a full disk
uncounted). MARINA_SPEND_CAP_ON_DB_ERROR=allow lets such calls through
uncounted instead (logged). Spend the ledger's spool holds (written by this
process while the database did not answer, ledger/spend/spool.py) counts as
spent: it is added to spend_daily's figure when a lease is sized."""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import secrets
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from datetime import time as day_start
from functools import lru_cache
from typing import Any, TypeGuard

from django.conf import settings
from django.db import DatabaseError, connection
from genai_prices import Usage as _PriceUsage
from genai_prices import calc_price

from kernel.dbthread import DbThread
from kernel.dbwriter import write_turn as sqlite_write_turn
from kernel.money import dollars, to_nanousd
from kernel.rawcursor import PerConnection, RawCursor
from ledger.spend.services import spool_nearly_full, spool_problem, spooled_spend, utc_today
from passthru.errors import ApiError

log = logging.getLogger(__name__)

TABLE = "passthru_spendhold"
HOLD_TTL_SECONDS = 3600.0  # rows older than this are deleted (a process that died)
LEASE_STALE_SECONDS = 10.0  # a lease row not renewed for this long no longer counts (its process died or hangs)
LEASE_VALID_SECONDS = 5.0  # a process serves calls from its lease only this long after its row was last written
RENEW_SECONDS = 1.0  # a lease in use is renewed at least this often
IDLE_SECONDS = 1.0  # a lease without calls in flight for this long is given back
TICK_SECONDS = 0.25  # how often the ticker looks at the leases
CHUNK_ESTIMATES = 8  # a lease is sized for this many more calls like the largest asking...
CHUNK_CAP_FRACTION = 100  # ...or 1/100 of the cap, whichever is more...
CHUNKS_LEFT = 3  # ...while this many chunks more stay free: nearer the cap, a lease is its calls in flight, exactly
BYTES_PER_TOKEN = 4  # the prompt's tokens, estimated from the body's size (JSON keys included: on the high side)
_LOCK = (0x4D41, 0x5249)  # PostgreSQL advisory lock (two int4 keys) serialising the checks
# The monotonic clock the leases' ages are read on (renewal, idleness,
# validity), looked up at each call: tests move it on rather than wait out
# IDLE_SECONDS or RENEW_SECONDS in real time.
clock: Callable[[], float] = time.monotonic


# --- The estimate ---------------------------------------------------------------
@lru_cache(maxsize=512)
def _rates(provider: str, upstream_model: str) -> tuple[float, float] | None:
    """(nano-dollars per prompt token, per completion token), or None if unpriced."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prompt = calc_price(_PriceUsage(input_tokens=1_000_000), model_ref=upstream_model, provider_id=provider)
            completion = calc_price(_PriceUsage(output_tokens=1_000_000), model_ref=upstream_model, provider_id=provider)
    except (LookupError, ValueError):
        return None
    # $ per million tokens = 1000 nano-dollars per token per $.
    return float(prompt.total_price) * 1000, float(completion.total_price) * 1000


def completion_tokens(body: dict[str, Any]) -> int:
    """The completion tokens a call may produce: its own limit, else the default, times `n`."""
    limits = [v for v in (body.get("max_completion_tokens"), body.get("max_tokens")) if _positive_int(v)]
    limit = limits[0] if limits else int(settings.MARINA_SPEND_CAP_COMPLETION_TOKENS)
    n = body.get("n")
    return limit * (n if _positive_int(n) else 1)


def _positive_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def estimate_nanousd(provider: str, upstream_model: str, body: dict[str, Any], body_bytes: int) -> int:
    """What a call is held at: its prompt (the request body's size in bytes,
    BYTES_PER_TOKEN a token) and its completion (`completion_tokens`) at the
    model's list price; 0 for a model without a known price."""
    rates = _rates(provider, upstream_model)
    if rates is None:
        return 0
    prompt_tokens = -(-body_bytes // BYTES_PER_TOKEN)
    return math.ceil(rates[0] * prompt_tokens + rates[1] * completion_tokens(body))


# --- Leases, on a thread of their own ------------------------------------------------
@dataclass
class Figures:
    """Today's figures when a call was refused."""

    spent: int
    held: int
    holds: int


@dataclass
class Hold:
    """One upstream call's estimate, counted in its process's lease until released."""

    day: date
    nanousd: int
    counted: bool = True  # False: let through unchecked (the database did not answer)


@dataclass
class _Lease:
    """This process's room under one day's cap: a row of passthru_spendhold
    (`size` nano-dollars), and what is used of it since it was last sized."""

    day: date
    id: int  # the row's id: random, one per process and day
    cap: int = 0  # the cap it was sized under (settings may change)
    size: int = 0  # L: the room the row reserves
    in_flight: int = 0  # U: estimates of this process's calls not yet recorded
    calls: int = 0  # how many calls that is
    recorded: int = 0  # B: spend of calls recorded since the lease was sized (not yet in the S it was sized on)
    published: int = 0  # what its row says now: size - recorded, as last written
    chunked: bool = False  # sized with room beyond its calls (the cap far off)
    renewed: float = -math.inf  # monotonic time its row was last written (sized or renewed)
    used: float = 0.0  # monotonic time of its last hold or release
    busy: bool = False  # being sized, renewed late or shrunk: no call is served from it meanwhile
    row: bool = False  # its row exists

    def serves(self, estimate: int, cap: int, now: float) -> bool:
        """May a call estimated at `estimate` start on this lease, without the database?"""
        used = self.in_flight + self.recorded
        return (
            not self.busy and self.cap == cap and now - self.renewed < LEASE_VALID_SECONDS
            and used < self.size and used + estimate <= self.size
        )


class Book:
    """A process's leases, by day, and the lock the event loop's fast path and
    the cap thread share (held for microseconds: never across a database
    statement)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.leases: dict[date, _Lease] = {}
        # When the ticker's last write failed: it tries again RENEW_SECONDS later, not at
        # every tick (a database that does not answer is asked once a second, logged once a second).
        self.write_failed = -math.inf

    def lease(self, day: date) -> _Lease:  # with the lock held
        lease = self.leases.get(day)
        if lease is None:
            lease = self.leases[day] = _Lease(day, secrets.randbits(63))
        return lease

    def release(self, holds: list[Hold], spent: int) -> bool:
        """Count released calls at what they spent; True if a lease sized
        without a chunk (near the cap) should now publish its room left."""
        now = clock()
        publish = False
        with self.lock:
            for i, held in enumerate(h for h in holds if h.counted):
                lease = self.leases.get(held.day)
                if lease is None:
                    continue
                lease.in_flight -= held.nanousd
                lease.calls -= 1
                lease.recorded += spent if i == 0 else 0  # the request's spend, once
                lease.used = now
                publish = publish or (lease.row and not lease.chunked)
        return publish


@dataclass
class _Ask:
    day: date
    estimate: int
    cap: int
    answer: concurrent.futures.Future[tuple[bool, Figures]]


_asks: deque[_Ask] = deque()
_thread = DbThread("spendcap")  # kernel/dbthread.py
_book = Book()
SWEEP_EVERY = 1000  # batches
_state = {"batches": 0}
_ticker: list[threading.Thread] = []  # started with the first lease (after gunicorn's fork)


class _Statements(RawCursor):
    """The cap thread's statements (kernel/rawcursor.py says why raw and
    prepared): leases lost in a database crash are processes that crashed with it."""

    def __init__(self) -> None:
        super().__init__()
        p = self.p
        self.figures = (
            f"SELECT (SELECT COALESCE(SUM(cost_nanousd), 0) FROM spend_daily WHERE day = {p}),"
            f" COALESCE(SUM(nanousd), 0), COUNT(*) FROM {TABLE} WHERE day = {p} AND created_at > {p} AND id <> {p} AND nanousd > 0"
        )
        self.upsert = (
            f"INSERT INTO {TABLE} (id, day, nanousd, created_at) VALUES ({p}, {p}, {p}, {p})"
            " ON CONFLICT (id) DO UPDATE SET nanousd = excluded.nanousd, created_at = excluded.created_at"
        )
        self.renew = f"UPDATE {TABLE} SET nanousd = {p}, created_at = {p} WHERE id = {p}"
        self.delete = f"DELETE FROM {TABLE} WHERE id = {p}"
        # sqlite3's default date adapter is deprecated; SQLite stores ISO text.
        self.day = date.isoformat if self.vendor == "sqlite" else (lambda day: day)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        # Django's connection is in autocommit mode: a transaction is begun by hand.
        self.cursor.execute("BEGIN IMMEDIATE" if self.vendor == "sqlite" else "BEGIN")
        try:
            yield
        except BaseException:
            self.cursor.execute("ROLLBACK")
            raise
        self.cursor.execute("COMMIT")

    def size(self, lease: _Lease, asks: list[_Ask], in_flight: int, in_flight_calls: int, now: float) -> tuple[list[tuple[bool, Figures]], int, int]:
        """Read today's spend S and the other live leases O, take the asks
        that fit beside them and this process's calls in flight, and size the
        lease: in flight + taken, plus a chunk while CHUNKS_LEFT more chunks
        would still be free after it. Returns the answers, the new size and
        the estimates taken."""
        day = self.day(lease.day)
        # Read before spend_daily: a record replayed in between is counted twice, never zero times.
        spooled = spooled_spend(lease.day)
        self.cursor.execute(self.figures, [day, day, now - LEASE_STALE_SECONDS, lease.id], **self.prepare)
        spent, others, other_rows = (int(v) for v in self.cursor.fetchone())
        spent += spooled
        cap = asks[-1].cap
        answers: list[tuple[bool, Figures]] = []
        taken = calls = 0
        for ask in asks:
            held = others + in_flight + taken
            fits = spent + held < ask.cap and spent + held + ask.estimate <= ask.cap
            if fits:
                taken += ask.estimate
                calls += 1
            answers.append((fits, Figures(spent, held, other_rows + in_flight_calls + calls)))
        chunk = max(CHUNK_ESTIMATES * max(ask.estimate for ask in asks), cap // CHUNK_CAP_FRACTION)
        if cap - spent - others - in_flight - taken < (1 + CHUNKS_LEFT) * chunk:
            chunk = 0  # near the cap: room beyond the calls in flight would be room others may need
        size = in_flight + taken + chunk
        if size > 0:
            self.cursor.execute(self.upsert, [lease.id, day, size, now], **self.prepare)
        elif lease.row:  # nothing in flight, no room: no row
            self.cursor.execute(self.delete, [lease.id], **self.prepare)
        return answers, size, taken

    def sweep(self, now: float) -> None:
        self.cursor.execute(f"DELETE FROM {TABLE} WHERE created_at <= {self.p}", [now - HOLD_TTL_SECONDS])


_statements = PerConnection(_Statements)


def _take(queue: deque[Any]) -> list[Any]:
    taken = []
    while queue:
        taken.append(queue.popleft())
    return taken


def settle(asks: list[_Ask], book: Book) -> list[tuple[bool, Figures]]:
    """Size the leases the asking calls need, and answer them, in one
    transaction, serialised across processes and hosts. Runs on the cap thread."""
    by_day: dict[date, list[_Ask]] = {}
    for ask in asks:
        by_day.setdefault(ask.day, []).append(ask)
    started, now = clock(), time.time()
    _state["batches"] += 1
    answers: dict[int, tuple[bool, Figures]] = {}
    with book.lock:
        leases = [book.lease(day) for day in by_day]
        # A snapshot: calls released from here on may be missing from the spend
        # read below, so they stay in `recorded` (counted twice a moment: never zero times).
        snapshot = [(lease.in_flight, lease.recorded, lease.calls) for lease in leases]
        for lease in leases:
            lease.busy = True
    sized: list[tuple[int, int, int]] = []
    try:
        with sqlite_write_turn():
            statements = _statements.get()
            with statements.transaction():
                if statements.vendor == "postgresql":
                    statements.cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", _LOCK, **statements.prepare)
                for lease, (in_flight, _, calls) in zip(leases, snapshot):
                    day_asks = by_day[lease.day]
                    day_answers, size, taken = statements.size(lease, day_asks, in_flight, calls, now)
                    answers.update((id(ask), answer) for ask, answer in zip(day_asks, day_answers))
                    sized.append((size, taken, sum(1 for fits, _ in day_answers if fits)))
                if _state["batches"] % SWEEP_EVERY == 0:
                    statements.sweep(now)
    finally:
        with book.lock:
            for i, lease in enumerate(leases):
                if i < len(sized) and len(sized) == len(leases):
                    size, taken, calls = sized[i]
                    lease.size, lease.cap, lease.row = size, by_day[lease.day][-1].cap, size > 0
                    lease.published, lease.chunked = size, size > snapshot[i][0] + taken
                    lease.in_flight += taken
                    lease.calls += calls
                    lease.recorded -= snapshot[i][1]
                    lease.renewed = lease.used = started
                lease.busy = False
    _start_ticker()
    return [answers[id(ask)] for ask in asks]


def tick(book: Book, *, renew: bool = True) -> None:
    """Bring this process's lease rows up to date: each at its room left
    (size - recorded: spend recorded is in spend_daily now, so others need not
    count it twice), renewed at least every RENEW_SECONDS while in use (others
    count a row only while renewed), deleted once idle for IDLE_SECONDS (its
    room given back). Runs on the cap thread: from the ticker, and after
    releases from a lease sized without a chunk (near the cap, where others
    may need that room at once)."""
    started, now = clock(), time.time()
    if started - book.write_failed < RENEW_SECONDS:
        return
    with book.lock:
        live = [lease for lease in book.leases.values() if lease.row and not lease.busy]
        idle = [lease for lease in live if lease.calls == 0 and started - lease.used >= IDLE_SECONDS]
        for lease in idle:
            lease.busy = True  # serves no call while its row goes
        writes = [
            (lease, max(0, lease.size - lease.recorded)) for lease in live
            if lease not in idle and (
                lease.published != lease.size - lease.recorded or (renew and started - lease.renewed >= RENEW_SECONDS)
            )
        ]
    if not idle and not writes:
        return
    written = False
    try:
        with sqlite_write_turn():
            statements = _statements.get()
            for lease in idle:
                statements.cursor.execute(statements.delete, [lease.id], **statements.prepare)
            for lease, room in writes:
                statements.cursor.execute(statements.renew, [room, now, lease.id], **statements.prepare)
        written = True
    finally:
        with book.lock:
            if not written:
                book.write_failed = started
            for lease in idle:
                lease.busy = False
                if written:  # else its row is still there: deleted at a later tick
                    lease.row, lease.size, lease.recorded, lease.published = False, 0, 0, 0
            for lease, room in writes if written else ():
                lease.published = room
                # Renewed late, others may have taken its room meanwhile: its
                # row still counts its calls in flight, but none is served from
                # it until it is sized again (under the lock). A write that
                # failed renews nothing: the lease serves calls for
                # LEASE_VALID_SECONDS after its last write that succeeded.
                if started - lease.renewed < LEASE_VALID_SECONDS:
                    lease.renewed = started
            for day in [day for day, lease in book.leases.items() if not lease.row and lease.calls == 0 and day < utc_today()]:
                del book.leases[day]


def _start_ticker() -> None:
    if not _ticker:
        _ticker.append(threading.Thread(target=_ticking, name="spendcap-ticker", daemon=True))
        _ticker[0].start()


def _ticking() -> None:
    while True:
        time.sleep(TICK_SECONDS)
        if any(lease.row for lease in list(_book.leases.values())):
            try:
                _thread.submit(_tick_on_thread)
            except RuntimeError:  # the interpreter is shutting down
                return


def _tick_on_thread(renew: bool = True) -> None:
    try:
        tick(_book, renew=renew)
    except (DatabaseError, connection.Database.Error):  # type: ignore[attr-defined]
        connection.close()  # the next tick tries again, on a new connection
        log.warning("spend cap lease not renewed: the database did not answer", exc_info=True)


def _on_thread() -> None:
    asks = _take(_asks)
    if not asks:
        return  # an earlier run took this job's work
    try:
        answers = _settle_or_retry(asks)
    except Exception as exc:  # a bug: every caller must still get an answer (a 500), none wait forever
        log.exception("spend cap check failed")
        for ask in asks:
            ask.answer.set_exception(exc)
        return
    for ask, answer in zip(asks, answers):
        ask.answer.set_result(answer)


_UNCHECKED = Figures(-1, 0, 0)  # spent -1: let through without a lease (the database did not answer)
_UNAVAILABLE = Figures(-2, 0, 0)  # the database did not answer: refused (503) unless MARINA_SPEND_CAP_ON_DB_ERROR=allow
RETRY_AFTER_SECONDS = 2


def _settle_or_retry(asks: list[_Ask]) -> list[tuple[bool, Figures]]:
    try:
        return settle(asks, _book)
    except (DatabaseError, connection.Database.Error):  # type: ignore[attr-defined]  # Django's, and the raw driver's
        connection.close()  # perhaps a dead connection: the next try opens a new one
    try:
        return settle(asks, _book)
    except (DatabaseError, connection.Database.Error):  # type: ignore[attr-defined]
        connection.close()
        if settings.MARINA_SPEND_CAP_ON_DB_ERROR == "allow":
            log.warning("spend cap not checked: the database did not answer (let through: MARINA_SPEND_CAP_ON_DB_ERROR=allow)", exc_info=True)
            return [(True, _UNCHECKED) for _ in asks]
        log.warning("spend cap not checked: the database did not answer; %d calls refused", len(asks), exc_info=True)
        return [(False, _UNAVAILABLE) for _ in asks]


async def hold(provider: str, upstream_model: str, body: dict[str, Any], body_bytes: int) -> Hold | None:
    """Check the cap for one upstream call and count its estimate in this
    process's lease: the hold (to `release` once the call's spend is
    recorded), None with the cap off, or the 429 `spend_cap_reached` stating
    today's figures. Served from the lease when it has room, without the
    database; else the cap thread sizes the lease."""
    cap = settings.MARINA_DAILY_SPEND_CAP_USD
    if cap is None:
        return None
    if spool_nearly_full() and settings.MARINA_SPEND_CAP_ON_DB_ERROR != "allow":
        # The spool's own words: it may be broken with the database well (/v1/health says so too).
        raise _unavailable(spool_problem() or "the database does not answer and the ledger's spool is nearly full")
    estimate = estimate_nanousd(provider, upstream_model, body, body_bytes)
    today = utc_today()
    cap_nanousd = to_nanousd(cap)
    with _book.lock:
        lease = _book.leases.get(today)
        now = clock()
        if lease is not None and lease.serves(estimate, cap_nanousd, now):
            lease.in_flight += estimate
            lease.calls += 1
            lease.used = now
            return Hold(today, estimate)
    ask = _Ask(today, estimate, cap_nanousd, concurrent.futures.Future())
    _asks.append(ask)
    _thread.submit(_on_thread)
    taken, figures = await asyncio.wrap_future(ask.answer)
    if taken:
        return Hold(today, estimate, counted=figures is not _UNCHECKED)
    if figures is _UNAVAILABLE:
        raise _unavailable("the database does not answer")
    resets = datetime.combine(today + timedelta(days=1), day_start(0), tzinfo=UTC)
    in_flight = f"{figures.holds} call{'s' if figures.holds != 1 else ''} in flight"
    # The openai and anthropic SDKs retry a 429 after their own short backoff
    # unless told not to: a refusal that lasts until midnight says so (and when).
    wait = max(1, math.ceil((resets - datetime.now(UTC)).total_seconds()))
    raise ApiError(
        429,
        f"Daily spend cap reached: {dollars(figures.spent)} spent today (UTC) and {dollars(figures.held)} held "
        f"by {in_flight}, of ${cap}; this call is estimated at {dollars(estimate)}. "
        f"It resets at {resets:%Y-%m-%d %H:%M} UTC; raise MARINA_DAILY_SPEND_CAP_USD "
        "(or set it to 'off') to continue.",
        code="spend_cap_reached",
        headers={"retry-after": str(wait), "x-should-retry": "false"},
    )


def _unavailable(why: str) -> ApiError:
    return ApiError(
        503,
        f"The daily spend cap cannot be checked: {why}, so this call is refused rather than let through "
        f"uncounted. Retry in {RETRY_AFTER_SECONDS} s; MARINA_SPEND_CAP_ON_DB_ERROR=allow lets calls through uncounted instead.",
        code="spend_cap_unavailable",
        error_type="server_error",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


def release(holds: Iterable[Hold], spent_nanousd: int = 0) -> None:
    """Take calls whose spend is now recorded (`spent_nanousd`, the request's,
    or that never ran) out of the calls in flight: their room in the lease
    is then counted at what they spent. No database work."""
    holds = list(holds)
    if holds and _book.release(holds, spent_nanousd):
        _thread.submit(_tick_on_thread, False)


def submit(fn: Callable[[], None]) -> concurrent.futures.Future[None]:
    """Run `fn` on the cap's thread, after what is queued there."""
    return _thread.submit(fn)


def give_back() -> None:
    """Delete this process's lease rows (a worker shutting down, tests between
    cases): run on the cap thread (`submit(give_back)`)."""
    with _book.lock:
        leases = [lease for lease in _book.leases.values() if lease.row]
        _book.leases.clear()
    if leases:
        try:
            with sqlite_write_turn():
                statements = _statements.get()
                for lease in leases:
                    statements.cursor.execute(statements.delete, [lease.id], **statements.prepare)
        except (DatabaseError, connection.Database.Error):  # type: ignore[attr-defined]
            connection.close()
            log.warning("spend cap leases not given back: the database did not answer (they expire)", exc_info=True)


def forget() -> None:
    """Drop this process's leases without touching the database (tests: the
    case before's database is gone). Run on the cap thread."""
    with _book.lock:
        _book.leases.clear()


def close_connection() -> None:
    """Close the cap thread's connection (tests do, before dropping a database)."""
    _thread.close_connection()
