"""Fixtures of the passthru tests."""
from __future__ import annotations

import re
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

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


@dataclass
class Raw:
    """An answer written as these bytes, then: "keep" the connection for the next request,
    "close" it, or "stall" (write nothing more until the client closes it)."""

    data: bytes
    then: str = "keep"


def raw_reply(body: bytes = b'{"ok": true}', status: int = 200, headers: tuple[str, ...] = ()) -> bytes:
    """A whole HTTP/1.1 answer framed by Content-Length."""
    head = [f"HTTP/1.1 {status} X", "Content-Type: application/json", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


class RawUpstream:
    """A provider on loopback that keeps the bytes of each request as they came (head and
    body, `requests`) and answers each with the next of `answers` (a small JSON reply
    when there is none), counting the connections it accepted and those the client closed."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.answers: deque[Raw] = deque()
        self.requests: list[bytes] = []
        self.accepted = 0
        self.closed_by_client = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1"

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:  # closed
                return
            with self.lock:
                self.accepted += 1
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        with sock:
            data = b""
            while True:
                while b"\r\n\r\n" not in data:
                    if not (part := sock.recv(65536)):
                        self._client_closed()
                        return
                    data += part
                head = data[: data.index(b"\r\n\r\n") + 4]
                length = int(re.search(rb"(?i)\r\ncontent-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
                while len(data) < len(head) + length:
                    data += sock.recv(65536)
                with self.lock:
                    self.requests.append(data[: len(head) + length])
                    answer = self.answers.popleft() if self.answers else Raw(raw_reply())
                data = data[len(head) + length :]
                sock.sendall(answer.data)
                if answer.then == "close":
                    return
                if answer.then == "stall":
                    while sock.recv(65536):
                        pass
                    self._client_closed()
                    return

    def _client_closed(self) -> None:
        with self.lock:
            self.closed_by_client += 1

    def wait_closed(self, count: int, within: float = 5.0) -> bool:
        """Whether the client has closed `count` connections (waiting up to `within` seconds)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.closed_by_client >= count:
                return True
            time.sleep(0.01)
        return False


@pytest.fixture
def raw_upstream() -> Iterator[RawUpstream]:
    server = RawUpstream()
    yield server
    server.listener.shutdown(socket.SHUT_RDWR)  # wakes its accept()
    server.listener.close()
