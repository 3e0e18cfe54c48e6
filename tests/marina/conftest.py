"""Fixtures for tests/marina: a second live server, Django's route alone."""
from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from marina.asgi import django_application


class _ThreadedServer(uvicorn.Server):
    def install_signal_handlers(self) -> None:
        pass


@pytest.fixture(scope="session")
def _django_only_server(django_db_setup, django_db_blocker) -> Iterator[str]:  # type: ignore[no-untyped-def]
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = _ThreadedServer(uvicorn.Config(django_application, lifespan="off", log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(5)


@pytest.fixture
def urls(marina_url: str, _django_only_server: str) -> dict[str, str]:
    return {"fast": marina_url, "django": _django_only_server}
