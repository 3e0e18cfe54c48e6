"""Fixtures of the passthru tests."""
from __future__ import annotations

import select
import socket
from collections.abc import Iterator

import pytest


@pytest.fixture
def unanswered() -> Iterator[tuple[str, int]]:
    """A loopback address whose SYNs go unanswered: a listener with the smallest backlog, its
    accept queue filled by connections nobody accepts, after which the kernel drops every SYN to
    it (Linux counts them as ListenOverflows) and a connect stays in progress."""
    with socket.create_server(("127.0.0.1", 0), backlog=0) as full:
        fillers: list[socket.socket] = []
        try:
            while True:
                assert len(fillers) < 16, "the listener's accept queue never filled"
                filler = socket.socket()
                fillers.append(filler)
                filler.setblocking(False)
                filler.connect_ex(full.getsockname())
                if not select.select([], [filler], [], 0.3)[1]:
                    break  # this one got no answer: the queue is full
            yield full.getsockname()
        finally:
            for filler in fillers:
                filler.close()
