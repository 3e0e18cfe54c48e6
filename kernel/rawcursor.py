"""A worker thread's raw DB-API cursor on its own Django connection, for the
rate limiter's and the spend cap's statements (passthru/ratelimit.py,
passthru/spendcap.py), each run on one thread per process.

Raw, because Django's cursor wrapper costs more CPU than these statements
(bench/ratelimit.py: ~200 vs ~75 µs on PostgreSQL). On PostgreSQL the
statements are prepared (planned once per connection, not per call) and
commit without waiting for the WAL flush (synchronous_commit off, this
connection only): what each module would lose in a database crash is said
where its statements are."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from django.db import connection

from kernel.dbthread import relax_commit
from kernel.prepared import server_binding_cursor


class RawCursor:
    def __init__(self) -> None:
        connection.ensure_connection()
        self.raw: Any = connection.connection
        self.vendor = connection.vendor
        # Prepared statements need a server-binding cursor (kernel/prepared.py).
        self.cursor = server_binding_cursor(self.raw) if self.vendor == "postgresql" else self.raw.cursor()
        self.p = "?" if self.vendor == "sqlite" else "%s"  # the placeholder
        self.prepare: dict[str, bool] = {"prepare": True} if self.vendor == "postgresql" else {}
        relax_commit()  # kernel/dbthread.py


C = TypeVar("C", bound=RawCursor)


class PerConnection(Generic[C]):
    """The thread's statements, made again when Django has opened a new connection."""

    def __init__(self, make: Callable[[], C]) -> None:
        self._make = make
        self._current: C | None = None

    def get(self) -> C:
        if self._current is None or connection.connection is not self._current.raw:
            self._current = self._make()
        return self._current
