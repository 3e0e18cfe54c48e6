"""The daily dollar cap (MARINA_DAILY_SPEND_CAP_USD), checked before each upstream call.

It reads spend_daily, so every worker and host sharing the database enforces
one cap. Calls already in flight may finish past it; no new one starts."""
from __future__ import annotations

import asyncio
from datetime import datetime, time, timedelta, timezone

from django.conf import settings

from ledger import selectors, services
from passthru.errors import ApiError
from passthru.pricing import format_usd, to_nanousd


async def check() -> None:
    cap = settings.MARINA_DAILY_SPEND_CAP_USD
    if cap is None:
        return
    today = selectors.utc_today()
    spent = await asyncio.wrap_future(services.submit(selectors.spent_nanousd, today))
    if spent >= to_nanousd(cap):
        resets = datetime.combine(today + timedelta(days=1), time(0), tzinfo=timezone.utc)
        raise ApiError(
            429,
            f"Daily spend cap reached: ${format_usd(spent)} of ${cap} spent today (UTC). "
            f"It resets at {resets:%Y-%m-%d %H:%M} UTC; raise MARINA_DAILY_SPEND_CAP_USD "
            "(or set it to 'off') to continue.",
            code="spend_cap_reached",
        )
