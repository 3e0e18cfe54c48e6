"""The gunicorn worker class (gunicorn.conf.py): uvicorn's, with its fast
parts named rather than picked by "auto", so that a missing uvloop or
httptools fails at start instead of quietly costing several times the CPU
(the pure-Python asyncio loop and h11 parser); and a shutdown that lets the
work left after the last request end before the process does."""
from __future__ import annotations

import socket
import sys
from typing import Any

from gunicorn.arbiter import Arbiter
from uvicorn import Server
from uvicorn_worker import UvicornWorker


class MarinaServer(Server):
    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        from kernel import allocator, checkpoint, collector
        from ledger.spend import services

        # Python's cycle collector once a second on this loop, deferred while a
        # burst is taken in, instead of by allocation counts: a burst's objects
        # all live until their streams end (kernel/collector.py).
        collector.start()
        # The C heap's free pages given back once a second: a burst's request
        # bodies, freed among the streams' state, would stay resident as holes
        # (kernel/allocator.py).
        allocator.start_trimming()
        # SQLite's checkpoints on a thread of their own from here on, not in
        # the commit of the call that fills the log (kernel/checkpoint.py).
        checkpoint.start()
        # Journals left by a worker that died (kill -9, OOM) are replayed now,
        # on the ledger's writer thread, not at this worker's first trace
        # (ledger/spend/spool.py).
        services.submit(services.recover)
        await super().startup(sockets=sockets)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets=sockets)
        # Once serve() returns, uvicorn raises the SIGTERM it caught again, with
        # its default action (uvicorn_worker resets it): the process ends at
        # once, without atexit. So what the last requests left behind is
        # finished here: streams still read after their clients left, their
        # traces, and the daily cap's releases (passthru/afterwards.py).
        from passthru.afterwards import finish

        await finish()


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

    async def _serve(self) -> None:
        # uvicorn_worker's, with MarinaServer for uvicorn's Server.
        self.config.app = self.wsgi
        server = MarinaServer(config=self.config)
        self._install_sigquit_handler()
        await server.serve(sockets=self.sockets)
        if not server.started:
            sys.exit(Arbiter.WORKER_BOOT_ERROR)
