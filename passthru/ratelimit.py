"""Rate limit for POST /v1/...: a token bucket per client, shared by every
gunicorn worker and every host on the database.

A client is the caller's key name (`key:<name>`), or its IP (`ip:<addr>`)
when it came without a key (open mode). The bucket holds up to
MARINA_RATE_LIMIT_BURST tokens and refills at MARINA_RATE_LIMIT_RPS a second;
each request takes one. Off while MARINA_RATE_LIMIT_RPS is 0 (the default).

Why the database: buckets kept in each process would let N workers on M hosts
through N×M times the limit. One statement takes a token atomically (an
upsert that refills by the time elapsed on the database's clock and updates
only when a whole token is there); it runs on one thread per process with a
persistent connection, like the ledger writer, and costs one round trip per
request (bench/ratelimit.py measures it). A refusal reads the bucket once more
to say when the next token comes (Retry-After)."""
from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping

from django.conf import settings
from django.db import DatabaseError, connection

from kernel import proxies
from kernel.dbthread import DbThread
from kernel.dbwriter import write_turn as sqlite_write_turn
from kernel.rawcursor import PerConnection, RawCursor
from passthru.errors import ApiError

log = logging.getLogger(__name__)

TABLE = "passthru_ratebucket"

# The database's clock in seconds since the epoch, per vendor.
_NOW = {
    "postgresql": "EXTRACT(EPOCH FROM clock_timestamp())",
    "sqlite": "((julianday('now') - 2440587.5) * 86400.0)",
}
_LEAST = {"postgresql": "LEAST", "sqlite": "min"}
_GREATEST = {"postgresql": "GREATEST", "sqlite": "max"}


def _take_sql(vendor: str) -> str:
    least, greatest = _LEAST[vendor], _GREATEST[vendor]
    refilled = f"{least}(%s, b.tokens + {greatest}(0, excluded.updated_at - b.updated_at) * %s)"
    return (
        f"INSERT INTO {TABLE} AS b (client, tokens, updated_at) VALUES (%s, %s - 1, {_NOW[vendor]}) "
        f"ON CONFLICT (client) DO UPDATE SET tokens = {refilled} - 1, "
        f"updated_at = {greatest}(b.updated_at, excluded.updated_at) "
        f"WHERE {refilled} >= 1 RETURNING tokens"
    )


class _Statements(RawCursor):
    """The limiter's statements for its vendor (kernel/rawcursor.py says why
    raw and prepared): a bucket lost in a database crash is a full bucket, no
    harm done."""

    def __init__(self) -> None:
        super().__init__()
        self.take = _take_sql(self.vendor).replace("%s", self.p)
        self.read = f"SELECT tokens, updated_at, {_NOW[self.vendor]} FROM {TABLE} WHERE client = {self.p}"

    def run(self, sql: str, params: list[object]) -> tuple[object, ...] | None:
        self.cursor.execute(sql, params, **self.prepare)
        row = self.cursor.fetchone()
        return tuple(row) if row is not None else None


_statements = PerConnection(_Statements)


def take(client: str, rps: float, burst: int) -> float | None:
    """Take one token from `client`'s bucket: None if taken, else the seconds
    until one is there. Runs on the limiter thread (sync, on its connection)."""
    with sqlite_write_turn():
        statements = _statements.get()
        if statements.run(statements.take, [client, burst, burst, rps, burst, rps]) is not None:
            return None
        row = statements.run(statements.read, [client])
    if row is None:  # deleted by a sweep in between: there is a full bucket now
        return 0.0
    tokens, updated_at, now = (float(v) for v in row)  # type: ignore[arg-type]
    available = min(burst, tokens + max(0.0, now - updated_at) * rps)
    return max(0.0, (1 - available) / rps)


def sweep(rps: float, burst: int) -> int:
    """Delete buckets idle long enough to be full again: a full bucket and no
    bucket mean the same, so the table holds only recent clients."""
    vendor = connection.vendor
    idle = burst / rps + 60
    with sqlite_write_turn(), connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {TABLE} WHERE updated_at < {_NOW[vendor]} - %s", [idle])
        return int(cursor.rowcount)


# One thread per process holds the limiter's connection (kernel/dbthread.py):
# a thread and a connection per call would cost more than the check itself.
_limiter = DbThread("ratelimit")
SWEEP_EVERY = 10_000  # checks
_state = {"checks": 0}


def _on_thread(client: str, rps: float, burst: int) -> float | None:
    _state["checks"] += 1
    for attempt in (1, 2):
        try:
            if _state["checks"] % SWEEP_EVERY == 0:
                sweep(rps, burst)
            return take(client, rps, burst)
        except (DatabaseError, connection.Database.Error):  # type: ignore[attr-defined]  # Django's, and the raw driver's
            connection.close()  # perhaps a dead connection: the next try opens a new one
            if attempt == 2:
                # Fail open: a limiter that cannot reach its table must not
                # take the whole API down with it (the ledger will complain too).
                log.warning("rate limit not checked: the database did not answer", exc_info=True)
    return None


def client_ip(peer: str, headers: Mapping[str, str]) -> str:
    """The client's address: the socket peer, or behind MARINA_TRUSTED_PROXIES
    the right-most X-Forwarded-For hop that is not one of them (kernel/proxies.py)."""
    return proxies.client_address(peer, headers, proxies.parse(settings.MARINA_TRUSTED_PROXIES))


def client_of(key_name: str | None, peer: str, headers: Mapping[str, str]) -> str:
    """The bucket's name: the key name, else the IP."""
    return f"key:{key_name}" if key_name else f"ip:{client_ip(peer, headers)}"


async def check(client: str) -> None:
    """Take a token for `client`, or raise the 429 with Retry-After."""
    rps = settings.MARINA_RATE_LIMIT_RPS
    if rps <= 0:
        return
    burst = settings.MARINA_RATE_LIMIT_BURST
    wait = await asyncio.wrap_future(_limiter.submit(_on_thread, client, rps, burst))
    if wait is None:
        return
    raise ApiError(
        429,
        f"Rate limit reached: {rps:g} requests a second (bursts of {burst}) per client; "
        f"retry in {wait:.2f} s (MARINA_RATE_LIMIT_RPS, MARINA_RATE_LIMIT_BURST).",
        code="rate_limit_exceeded",
        headers={"retry-after": str(max(1, math.ceil(wait))), "retry-after-ms": str(max(1, math.ceil(wait * 1000)))},
    )


def close_connection() -> None:
    """Close the limiter thread's connection (tests do, before dropping a database)."""
    _limiter.close_connection()
