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


def native_binding_cursor(raw: Any) -> Any:
    """A server-binding cursor whose statements take PostgreSQL's own
    placeholders, $1, $2, ... (psycopg's RawCursor). psycopg turns a statement's
    `%s` into those with a regular expression, and keeps the result only for
    statements of at most 50 parameters and 4 KB: the ledger's one-statement
    trace write, with 58 for a plain call, was split again on every call:
    0.97 M of a plain call's 5.0 M instructions."""
    import psycopg

    return psycopg.RawCursor(raw)
