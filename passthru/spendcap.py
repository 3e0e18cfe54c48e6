"""The daily dollar cap (MARINA_DAILY_SPEND_CAP_USD), checked before each upstream call.

The cap is one figure for every worker and host sharing the database: the
total of spend_daily for the UTC day. Reading that total before every call
costs a query and two thread hops per call, so each process keeps a snapshot
of it, refreshed in the background once it is older than
MARINA_SPEND_CAP_REFRESH_SECONDS (default 1), and adds its own calls recorded
since (ledger.spend.services.recorded_nanousd). So:
- this process's own spend counts at once (each call as soon as it is recorded);
- spend recorded by other processes or hosts counts within one refresh interval
  (plus one query): the cap can be overshot by at most what the others spend in
  that time, on top of the calls already in flight, which any cap checked
  before a call lets finish;
- MARINA_SPEND_CAP_REFRESH_SECONDS=0 reads the total before every call.
A new UTC day, or the first call, always waits for a fresh read."""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time as clock
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from django.conf import settings

from ledger.spend import selectors, services
from marina.money import dollars, to_nanousd
from passthru.errors import ApiError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Snapshot:
    day: date
    total: int  # spend_daily's total for `day` when read
    mark: int  # services.recorded_nanousd(day) at that moment
    read_at: float  # time.monotonic()

    def spent(self) -> int:
        """The total now, as far as this process knows."""
        return self.total + services.recorded_nanousd(self.day) - self.mark


_snapshot: Snapshot | None = None
_refreshing: concurrent.futures.Future[tuple[int, int]] | None = None


def _read(day: date) -> concurrent.futures.Future[tuple[int, int]]:
    global _refreshing

    def keep(done: concurrent.futures.Future[tuple[int, int]]) -> None:
        global _snapshot, _refreshing
        _refreshing = None
        if done.exception() is None:
            total, mark = done.result()
            _snapshot = Snapshot(day, total, mark, clock.monotonic())
        else:
            log.warning("could not read today's spend: %s", done.exception())

    future = _refreshing = services.submit(services.spend_snapshot, day)
    future.add_done_callback(keep)  # may run at once, here: return the local name
    return future


async def spent_today(today: date) -> int:
    refresh = settings.MARINA_SPEND_CAP_REFRESH_SECONDS
    snap = _snapshot
    if snap is None or snap.day != today or refresh <= 0:
        total, mark = await asyncio.wrap_future(_read(today))
        return total + services.recorded_nanousd(today) - mark
    if clock.monotonic() - snap.read_at >= refresh and _refreshing is None:
        _read(today)  # in the background: this call goes on with the snapshot
    return snap.spent()


def forget() -> None:
    """Drop the snapshot (tests that write spend_daily directly call this)."""
    global _snapshot
    _snapshot = None


async def check() -> None:
    cap = settings.MARINA_DAILY_SPEND_CAP_USD
    if cap is None:
        return
    today = selectors.utc_today()
    spent = await spent_today(today)
    if spent >= to_nanousd(cap):
        resets = datetime.combine(today + timedelta(days=1), time(0), tzinfo=UTC)
        raise ApiError(
            429,
            f"Daily spend cap reached: {dollars(spent)} of ${cap} spent today (UTC). "
            f"It resets at {resets:%Y-%m-%d %H:%M} UTC; raise MARINA_DAILY_SPEND_CAP_USD "
            "(or set it to 'off') to continue.",
            code="spend_cap_reached",
        )
