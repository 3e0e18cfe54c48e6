"""The daily dollar cap (MARINA_DAILY_SPEND_CAP_USD), with the calls in
flight counted against it.

Checking only what has been spent lets every call already past the check
finish: 50 concurrent $0.01 calls at $0.32 of a $0.40 cap all went through.
So each upstream call first *holds* its estimated cost (`estimate_nanousd`:
the prompt's size, the model's price, and `max_tokens` or
MARINA_SPEND_CAP_COMPLETION_TOKENS) and goes ahead only if

    spent today + held by the calls in flight + this estimate <= the cap

(and something is left: spent + held < cap). The hold is a row of
passthru_spendhold, released once the call's spend is recorded (chat.py,
after the trace is committed), so a call counts as held, or as spent, or for
a moment as both; never as neither. The overshoot is then bounded by the
estimates' error (what calls cost beyond their estimate), not by concurrency,
on every worker and every host sharing the database: the check and the hold
are one transaction, serialised across hosts (PostgreSQL: an advisory
transaction lock; SQLite: the ledger's write turn, an flock taken by every
writer of the file, ledger/spend/services.py).

Cost: one small transaction before each upstream call (requests waiting
together share it) and one delete after, on a thread of its own with its own
connection, like the rate limiter's; bench/spendcap.py measures it. With the
cap off there is none of it.

A model nobody can price (no entry in genai-prices' tables) is held at 0: it
runs while something is left, and counts once it has run if the provider
reports a cost (OpenRouter does). A database that cannot be reached lets the
call through without a hold (logged)."""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import secrets
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
from django.db import DatabaseError, close_old_connections, connection
from genai_prices import Usage as _PriceUsage
from genai_prices import calc_price

from ledger.spend.selectors import utc_today
from ledger.spend.services import write_turn as sqlite_write_turn
from marina.money import dollars, to_nanousd
from passthru.errors import ApiError
from passthru.rawcursor import PerConnection, RawCursor

log = logging.getLogger(__name__)

TABLE = "passthru_spendhold"
HOLD_TTL_SECONDS = 3600.0  # a hold older than this is a call whose process died: it stops counting
BYTES_PER_TOKEN = 4  # the prompt's tokens, estimated from the body's size (JSON keys included: on the high side)
_LOCK = (0x4D41, 0x5249)  # PostgreSQL advisory lock (two int4 keys) serialising the checks


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


# --- Holds, on a thread of their own -----------------------------------------------
@dataclass
class Figures:
    """Today's figures when a call was checked."""

    spent: int
    held: int
    holds: int


@dataclass
class _Ask:
    day: date
    estimate: int
    cap: int
    hold_id: int
    answer: concurrent.futures.Future[tuple[bool, Figures]]


_asks: deque[_Ask] = deque()
_releases: deque[int] = deque()
_thread = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="spendcap")
HEALTH_CHECK_SECONDS = 1.0
SWEEP_EVERY = 1000  # batches
_state = {"checked_at": 0.0, "batches": 0}


class _Statements(RawCursor):
    """The cap thread's statements (passthru/rawcursor.py says why raw and
    prepared): holds lost in a database crash are calls that crashed with it."""

    def __init__(self) -> None:
        super().__init__()
        p = self.p
        self.figures = (
            f"SELECT (SELECT COALESCE(SUM(cost_nanousd), 0) FROM spend_daily WHERE day = {p}),"
            f" COALESCE(SUM(nanousd), 0), COUNT(*) FROM {TABLE} WHERE day = {p} AND created_at > {p}"
        )
        self.insert = f"INSERT INTO {TABLE} (id, day, nanousd, created_at) VALUES "
        self.row = f"({p}, {p}, {p}, {p})"
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

    def release(self, ids: list[int]) -> None:
        self.cursor.execute(f"DELETE FROM {TABLE} WHERE id IN ({', '.join([self.p] * len(ids))})", ids)

    def check(self, asks: list[_Ask], now: float) -> list[tuple[bool, Figures]]:
        if self.vendor == "postgresql":
            self.cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", _LOCK, **self.prepare)
        figures: dict[date, Figures] = {}
        answers: list[tuple[bool, Figures]] = []
        rows: list[object] = []
        for ask in asks:
            today = figures.get(ask.day)
            if today is None:
                self.cursor.execute(self.figures, [self.day(ask.day), self.day(ask.day), now - HOLD_TTL_SECONDS], **self.prepare)
                spent, held, holds = (int(v) for v in self.cursor.fetchone())
                today = figures[ask.day] = Figures(spent, held, holds)
            seen = Figures(today.spent, today.held, today.holds)
            taken = today.spent + today.held < ask.cap and today.spent + today.held + ask.estimate <= ask.cap
            if taken:
                today.held += ask.estimate
                today.holds += 1
                rows += [ask.hold_id, self.day(ask.day), ask.estimate, now]
            answers.append((taken, seen))
        if rows:
            # One multi-row statement (psycopg's executemany would use its pipeline mode, slower here).
            self.cursor.execute(self.insert + ", ".join([self.row] * (len(rows) // 4)), rows)
        return answers

    def sweep(self, now: float) -> None:
        self.cursor.execute(f"DELETE FROM {TABLE} WHERE created_at <= {self.p}", [now - HOLD_TTL_SECONDS])


_statements = PerConnection(_Statements)


def _take(queue: deque[Any]) -> list[Any]:
    taken = []
    while queue:
        taken.append(queue.popleft())
    return taken


def settle(asks: list[_Ask], releases: list[int]) -> list[tuple[bool, Figures]]:
    """Release the holds of calls now recorded, then check and hold for the
    asking calls, in one transaction. Runs on the cap thread."""
    now = time.time()
    _state["batches"] += 1
    with sqlite_write_turn():
        statements = _statements.get()
        if not asks:  # one statement: no transaction to open
            statements.release(releases)
            return []
        with statements.transaction():
            if releases:
                statements.release(releases)
            answers = statements.check(asks, now)
            if _state["batches"] % SWEEP_EVERY == 0:
                statements.sweep(now)
    return answers


def _on_thread() -> None:
    asks, releases = _take(_asks), _take(_releases)
    if not asks and not releases:
        return  # an earlier run took this job's work
    now = time.monotonic()
    if now - _state["checked_at"] >= HEALTH_CHECK_SECONDS:
        _state["checked_at"] = now
        close_old_connections()
    try:
        answers = _settle_or_retry(asks, releases)
    except Exception as exc:  # a bug: every caller must still get an answer (a 500), none wait forever
        log.exception("spend cap check failed")
        for ask in asks:
            ask.answer.set_exception(exc)
        return
    for ask, answer in zip(asks, answers):
        ask.answer.set_result(answer)


def _settle_or_retry(asks: list[_Ask], releases: list[int]) -> list[tuple[bool, Figures]]:
    try:
        return settle(asks, releases)
    except (DatabaseError, connection.Database.Error):  # type: ignore[attr-defined]  # Django's, and the raw driver's
        connection.close()  # perhaps a dead connection: the next try opens a new one
    try:
        return settle(asks, releases)
    except (DatabaseError, connection.Database.Error):  # type: ignore[attr-defined]
        connection.close()
        # Fail open, as the rate limiter does: a cap that cannot reach the
        # ledger must not take the whole API down (the ledger writes fail too).
        log.warning("spend cap not checked: the database did not answer", exc_info=True)
        _releases.extend(releases)  # for the next try
        return [(True, Figures(0, 0, 0)) for _ in asks]


async def hold(provider: str, upstream_model: str, body: dict[str, Any], body_bytes: int) -> int | None:
    """Check the cap for one upstream call and hold its estimate: the hold's
    id (to `release` once the call's spend is recorded), None with the cap
    off, or the 429 `spend_cap_reached` stating today's figures."""
    cap = settings.MARINA_DAILY_SPEND_CAP_USD
    if cap is None:
        return None
    estimate = estimate_nanousd(provider, upstream_model, body, body_bytes)
    today = utc_today()
    ask = _Ask(today, estimate, to_nanousd(cap), secrets.randbits(63), concurrent.futures.Future())
    _asks.append(ask)
    _thread.submit(_on_thread)
    taken, figures = await asyncio.wrap_future(ask.answer)
    if taken:
        return ask.hold_id
    resets = datetime.combine(today + timedelta(days=1), day_start(0), tzinfo=UTC)
    in_flight = f"{figures.holds} call{'s' if figures.holds != 1 else ''} in flight"
    raise ApiError(
        429,
        f"Daily spend cap reached: {dollars(figures.spent)} spent today (UTC) and {dollars(figures.held)} held "
        f"by {in_flight}, of ${cap}; this call is estimated at {dollars(estimate)}. "
        f"It resets at {resets:%Y-%m-%d %H:%M} UTC; raise MARINA_DAILY_SPEND_CAP_USD "
        "(or set it to 'off') to continue.",
        code="spend_cap_reached",
    )


def release(ids: Iterable[int]) -> None:
    """Drop holds whose calls' spend is now recorded (or that never ran).
    Not awaited: until done the calls count twice, never zero times."""
    ids = list(ids)
    if ids:
        _releases.extend(ids)
        _thread.submit(_on_thread)


def submit(fn: Callable[[], None]) -> concurrent.futures.Future[None]:
    """Run `fn` on the cap's thread, after what is queued there."""
    return _thread.submit(fn)


def close_connection() -> None:
    """Close the cap thread's connection (tests do, before dropping a database)."""
    # `connection` must be looked up on the cap thread: it is per-thread.
    _thread.submit(lambda: connection.close()).result()
