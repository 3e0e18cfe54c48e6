"""Prepared statements on PostgreSQL, for the statements run on every call
(the ledger's writes, the rate limiter's and the spend cap's).

Django's PostgreSQL cursors bind parameters on the client (its default,
`server_side_binding` off), and psycopg's client-binding cursors ignore
`prepare=True`: each call's statement was parsed and planned again. A
server-binding cursor on the same connection sends the parameters apart from
the SQL, so `execute(sql, params, prepare=True)` plans once per connection."""
from __future__ import annotations

from typing import Any


def server_binding_cursor(raw: Any) -> Any:
    """A server-binding cursor on `raw`, a psycopg connection (Django's `connection.connection`)."""
    import psycopg  # PostgreSQL only: SQLite installs need not have it

    return psycopg.Cursor(raw)
