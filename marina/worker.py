"""The gunicorn worker class (gunicorn.conf.py): uvicorn's, with its fast
parts named rather than picked by "auto", so that a missing uvloop or
httptools fails at start instead of quietly costing several times the CPU
(the pure-Python asyncio loop and h11 parser)."""
from __future__ import annotations

from typing import Any

from uvicorn_worker import UvicornWorker


class MarinaWorker(UvicornWorker):
    CONFIG_KWARGS: dict[str, Any] = {"loop": "uvloop", "http": "httptools"}
    sockets: list[Any]  # gunicorn's listeners (set by gunicorn's Worker; declared for mypy)

    def run(self) -> None:
        # uvicorn_worker hands uvicorn gunicorn's listener wrappers. On shutdown
        # uvloop closes the listening fd itself and then calls the wrapper's
        # close(), which fails on the closed fd and logs "Error while closing
        # socket [Errno 9] Bad file descriptor" at every SIGTERM. Given the real
        # socket objects, uvloop detaches them instead: nothing is closed twice.
        self.sockets = [getattr(listener, "sock", listener) for listener in self.sockets]
        super().run()
