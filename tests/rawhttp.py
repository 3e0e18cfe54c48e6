"""A chunked POST over a raw socket whose body is left open, for the tests of
refusing before the body is read (tests/marina/test_intake.py, tests/e2e/test_body_limits.py).

httpx sends a whole body before it reads the answer; these send the headers
and some chunks, then wait for an answer with the body still unfinished."""
from __future__ import annotations

import json
import socket
from typing import Any
from urllib.parse import urlsplit

CHUNK = b"x" * 4096
# The opening of a chat body whose message content the chunks then extend.
OPENING = b'{"model": "openrouter/x", "messages": [{"role": "user", "content": "'
CLOSING = b'"}]}'


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"


def open_chunked(base: str, path: str, headers: dict[str, str], chunks: int, size: int = len(CHUNK)) -> socket.socket:
    """A POST with `Transfer-Encoding: chunked`, OPENING and `chunks` chunks of
    `size` bytes sent, left open."""
    url = urlsplit(base)
    sock = socket.create_connection((url.hostname, url.port), timeout=10)
    head = f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers.items()) + "\r\n"
    sock.sendall(head.encode() + chunk(OPENING))
    piece = chunk(b"x" * size)
    for _ in range(chunks):
        sock.sendall(piece)
    return sock


def answer(sock: socket.socket) -> tuple[int, dict[str, str], Any]:
    """The next response on `sock` (a socket timeout: none came): status,
    lower-cased headers, and the JSON body."""
    data = b""
    while b"\r\n\r\n" not in data:
        part = sock.recv(65536)
        assert part, "the server closed the connection without an answer"
        data += part
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(rest) < int(headers["content-length"]):
        part = sock.recv(65536)
        assert part, "the server closed the connection mid-answer"
        rest += part
    return int(lines[0].split()[1]), headers, json.loads(rest)
