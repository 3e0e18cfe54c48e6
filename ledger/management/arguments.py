"""Argument forms shared by the management commands (ledger's and observability's)."""
from __future__ import annotations

from datetime import UTC, datetime, time

from django.core.management.base import CommandError


def moment(flag: str, text: str) -> datetime:
    """YYYY-MM-DD (that day's 00:00 UTC) or an ISO date-time (UTC unless it says
    otherwise); anything else is a one-line CommandError naming `flag`."""
    try:
        if len(text) == 10:
            return datetime.combine(datetime.strptime(text, "%Y-%m-%d").date(), time(0), tzinfo=UTC)
        found = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(f"{flag}: {text!r} is not a date (YYYY-MM-DD) or an ISO date-time") from None
    return found if found.tzinfo else found.replace(tzinfo=UTC)
