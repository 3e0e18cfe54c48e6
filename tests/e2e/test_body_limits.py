"""Large chunked bodies against a real gunicorn (issue 10, item 1).

A `Transfer-Encoding: chunked` POST has no Content-Length to refuse on. Without
a key it must be refused from its headers, before its body is read; with a key,
refused (413) where it passes MARINA_MAX_REQUEST_BYTES. Either way the worker
never holds the body: its peak resident memory does not grow by the body's size
while the client goes on sending it (the server drops the rest as it comes),
and the connection then serves the next request."""
from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest

from tests.conftest import MARINA_KEY
from tests.e2e.servers import Gunicorn
from tests.rawhttp import CLOSING, LAST_CHUNK, answer, chunk, open_chunked

pytestmark = pytest.mark.e2e

MIB = 1024 * 1024
LIMIT = MIB  # MARINA_MAX_REQUEST_BYTES for these servers
BODY = 64 * MIB  # what the client sends in all, 64 times the limit
PIECE = 64 * 1024


def peak_rss(pid: int) -> int:
    """A process's peak resident memory (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def send_the_rest(sock: socket.socket, sent: int) -> None:
    """Send the body up to BODY bytes and end it; then the connection serves another request."""
    piece = chunk(b"x" * PIECE)
    while sent < BODY:
        sock.sendall(piece)
        sent += PIECE
    sock.sendall(chunk(CLOSING) + LAST_CHUNK)
    sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    status, _, payload = answer(sock)
    assert status == 200 and payload["status"] == "ok"


@pytest.fixture
def server(servers) -> Gunicorn:
    server = servers.start(workers=1, MARINA_MAX_REQUEST_BYTES=str(LIMIT))
    # Warm the worker (imports, the first trace) before measuring it.
    for headers in ({}, {"authorization": f"Bearer {MARINA_KEY}"}):
        httpx.post(f"{server.base_url}/v1/chat/completions", json={"model": "openrouter/x", "messages": []}, headers=headers)
    return server


def test_a_chunked_body_without_a_key_is_refused_unread(server, upstream):
    (worker,) = server.worker_pids()
    before = peak_rss(worker)
    with open_chunked(server.base_url, "/v1/chat/completions", {"x-request-id": "req-big-nokey"}, 1, PIECE) as sock:
        # The answer comes while the body is still open: nothing waited for it.
        status, _, payload = answer(sock)
        assert status == 401 and payload["error"]["code"] == "invalid_api_key"
        send_the_rest(sock, PIECE)
    assert peak_rss(worker) - before < BODY / 4, (before, peak_rss(worker))
    trace = server.ledger.trace("req-big-nokey")
    assert trace is not None and trace["http_status"] == 401
    assert upstream.requests == []


def test_a_chunked_body_over_the_limit_is_refused_at_the_limit(server, upstream):
    (worker,) = server.worker_pids()
    before = peak_rss(worker)
    headers = {"authorization": f"Bearer {MARINA_KEY}", "x-request-id": "req-big-keyed"}
    sent = 2 * LIMIT
    with open_chunked(server.base_url, "/v1/chat/completions", headers, sent // PIECE, PIECE) as sock:
        status, _, payload = answer(sock)  # twice the limit sent, the body not ended
        assert status == 413
        assert payload["error"]["message"] == f"Request body is too large; the limit is MARINA_MAX_REQUEST_BYTES={LIMIT}."
        send_the_rest(sock, sent)
    assert peak_rss(worker) - before < BODY / 4, (before, peak_rss(worker))
    trace = server.ledger.trace("req-big-keyed")
    assert trace is not None and trace["http_status"] == 413 and trace["error_kind"] == "request_too_large"
    assert upstream.requests == []
