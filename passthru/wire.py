"""A lean HTTP/1.1 transport for httpx: asyncio protocols and httptools' C parser.

Why: with the τ²-sized body, httpx's default transport (httpcore over anyio and
h11, pure Python) cost ~1 ms of CPU per upstream call here, and its pool checks
every idle connection's socket on each request, so the cost grows with
concurrency; this transport costs ~0.1 ms (docs/performance.md). It plugs in
where httpx expects a transport (`httpx.AsyncBaseTransport`), so passthru/upstream.py
can build `httpx.Request`s and read `httpx.Response`s, and every
failure is raised as the httpx exception httpcore would raise (ConnectError,
ConnectTimeout, ReadTimeout, ReadError, RemoteProtocolError, PoolTimeout).
Beside httpx's one call, a request can be sent in two steps (`send`, then
`Sent.response()`): passthru/upstream.py then lets go of a streamed call's
body once it is written, not after the provider's first byte. A call whose
answer is read whole skips httpx's objects: `post` writes the bytes `send`
would write for its httpx.Request, and `Sent.read()` gives the answer's
status, headers and body as they came.

What it does: keep-alive connection pools per (scheme, host, port), at most
`max_connections` open and `max_keepalive` idle per pool, TLS with httpx's own
SSL context, bodies framed by Content-Length, chunked encoding or the
connection closing, the connect/read/pool timeouts of the request's
`timeout` extension, and back-pressure on slow readers. A request that had to
wait for a connection says how long in the response's `queued_seconds`
extension; while any wait, the transport logs a warning at most once a minute
and reports the count to `on_queue` (a Prometheus gauge). What it does not:
HTTP/2, proxies (passthru/upstream.py uses httpx's own transport when a proxy
applies), `Expect: 100-continue`, upgrades. A failed request is never retried
here: once the bytes may have left, a retry could bill a call twice."""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httptools
import httpx

_HIGH_WATER = 256 * 1024  # pause reading the socket when this much body waits unread
_LOW_WATER = 64 * 1024
_WARN_EVERY = 60.0  # seconds between two "calls wait for a connection" warnings

log = logging.getLogger(__name__)


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection, carrying one request at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.busy = False
        self.reading_paused = False
        self.deadline: asyncio.TimerHandle | None = None
        self.wait_since = 0.0
        self.read_timeout = 0.0
        self.queued = 0.0  # seconds the current request waited for this connection
        self._start_response()

    def _start_response(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.headers_done = False
        self.complete = False
        self.keep_alive = True
        self.until_eof = False  # no length and not chunked: the body ends when the server closes
        # A list, not a deque: an empty deque is ~0.6 KB of each of the thousands of streams a
        # worker may hold waiting (docs/performance.md); what waits here is bounded (_HIGH_WATER).
        self.chunks: list[bytes] = []
        self.buffered = 0
        self.error: Exception | None = None
        self.waiter: asyncio.Future[None] | None = None

    # --- asyncio.Protocol -----------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self.busy:  # bytes on an idle connection: it cannot be trusted again
            self.close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(httpx.RemoteProtocolError(f"Invalid HTTP response from the provider: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        # The parser holds this protocol's callbacks, and the deadline's timer
        # one of its methods: cycles only the garbage collector would free, and
        # with them the transport and the context the connection was made in.
        # Broken here, a closed connection is freed at once (docs/performance.md,
        # "The collector in a burst, and what a stream left to it").
        del self.parser
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
        if not self.busy or self.complete:
            return
        if exc is not None:  # a reset, not a clean close: even an until-EOF body is cut short
            self._fail(httpx.ReadError(f"The connection to the provider failed: {exc!r}"))
        elif self.headers_done and self.until_eof:
            self.complete = True
            self.keep_alive = False
            self._wake()
        elif self.headers_done:
            self._fail(httpx.RemoteProtocolError("The provider closed the connection before the end of the body."))
        else:
            self._fail(httpx.RemoteProtocolError("The provider closed the connection without sending a response."))

    # --- httptools callbacks -------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self.raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()
        names = {name.lower() for name, _ in self.raw_headers}
        chunked = any(n == b"transfer-encoding" and b"chunked" in v.lower() for n, v in self.raw_headers)
        self.until_eof = b"content-length" not in names and not chunked and self.status not in (204, 304)
        self.headers_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > _HIGH_WATER and not self.reading_paused and self.transport is not None:
            self.transport.pause_reading()
            self.reading_paused = True
        self._wake()

    def on_message_complete(self) -> None:
        self.complete = True
        self._wake()

    # --- used by the transport -------------------------------------------------
    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def _fail(self, exc: Exception) -> None:
        if self.error is None:
            self.error = exc
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)

    async def _wait(self, timeout: float | None) -> None:
        self.waiter = self.loop.create_future()
        self.wait_since = self.loop.time()
        # One timer per read-timeout period, not one per wait: a stream waits
        # once per event, and a timer set and cancelled each time cost more
        # than the rest of the relay. _check_deadline measures this wait.
        if timeout is not None and (self.deadline is None or timeout != self.read_timeout):
            if self.deadline is not None:
                self.deadline.cancel()
            self.read_timeout = timeout
            self.deadline = self.loop.call_later(timeout, self._check_deadline)
        try:
            await self.waiter
        finally:
            self.waiter = None

    def _check_deadline(self) -> None:
        self.deadline = None
        if self.waiter is None or self.waiter.done():
            return  # nobody waits now; the next wait sets the timer again
        waited = self.loop.time() - self.wait_since
        if waited >= self.read_timeout * 0.999:
            self._fail(httpx.ReadTimeout(f"No data from the provider for {self.read_timeout:g}s."))
        else:
            self.deadline = self.loop.call_later(self.read_timeout - waited, self._check_deadline)

    def usable(self) -> bool:
        return not self.closed and self.transport is not None and not self.transport.is_closing()

    def send(self, data: bytes) -> None:
        self._start_response()
        self.busy = True
        assert self.transport is not None
        self.transport.write(data)

    async def read_headers(self, timeout: float | None) -> None:
        while not self.headers_done:
            self._raise_if_ended()
            await self._wait(timeout)

    async def next_chunk(self, timeout: float | None) -> bytes | None:
        """The next piece of body, or None at its end."""
        while True:
            if self.chunks:
                chunk = self.chunks.pop(0)
                self.buffered -= len(chunk)
                if self.reading_paused and self.buffered < _LOW_WATER and self.transport is not None:
                    self.transport.resume_reading()
                    self.reading_paused = False
                return chunk
            if self.complete:
                return None
            self._raise_if_ended()
            await self._wait(timeout)

    def _raise_if_ended(self) -> None:
        """What ended the connection, raised: its error, or a closed one's (close() lets go of the error)."""
        if self.error is not None:
            raise self.error
        if self.closed:
            raise httpx.ReadError("The connection to the provider was closed.")

    def reusable(self) -> bool:
        return self.complete and self.keep_alive and not self.chunks and self.usable()

    def close(self) -> None:
        self.closed = True
        # Raised, the error's traceback holds the reader's frames, which hold this
        # connection: kept here too, it made a cycle that held the whole request
        # until the collector's next pass. Closed, a read raises a new one (below).
        self.error = None
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
        if self.transport is not None:
            self.transport.close()


class _Pool:
    """Connections to one (scheme, host, port)."""

    def __init__(self, scheme: str, host: str, port: int, transport: LeanTransport) -> None:
        self.scheme, self.host, self.port = scheme, host, port
        self.owner = transport
        self.idle: list[_Connection] = []  # last in, first out: the warmest connection first
        self.active = 0
        self.waiting: deque[asyncio.Future[None]] = deque()

    async def acquire(self, pool_timeout: float | None, connect_timeout: float | None) -> _Connection:
        queued = 0.0
        while True:
            while self.idle:
                conn = self.idle.pop()
                if conn.usable():
                    self.active += 1
                    conn.queued = queued
                    return conn
                conn.close()
            if self.active < self.owner.max_connections:
                break
            self.owner.waits()
            queued += await self._wait(pool_timeout if pool_timeout is None else pool_timeout - queued)
        self.active += 1
        self.owner.waits()
        try:
            conn = await self._connect(connect_timeout)
        except BaseException:
            self.active -= 1
            self._wake_one()
            raise
        conn.queued = queued
        return conn

    async def _wait(self, timeout: float | None) -> float:
        """Wait for a connection to be released; the seconds waited."""
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self.waiting.append(waiter)
        started = loop.time()
        self.owner.queue_changed(+1, self)
        try:
            await asyncio.wait_for(waiter, max(timeout, 0.0) if timeout is not None else None)
        except TimeoutError:
            raise httpx.PoolTimeout(
                f"No connection to {self.host}:{self.port} became free in time "
                f"({self.owner.max_connections} in use by this process)."
            ) from None
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._wake_one()  # woken, then cancelled: pass the free connection on
            raise
        finally:
            self.owner.queue_changed(-1, self)
        return loop.time() - started

    async def _connect(self, timeout: float | None) -> _Connection:
        loop = asyncio.get_running_loop()
        tls = self.owner.ssl_context if self.scheme == "https" else None
        try:
            sock = await _open_socket(loop, self.host, self.port, timeout)
            # From here the loop owns the socket and closes it on failure. The TLS handshake, work
            # the loop itself does, has the connect timeout to itself; plain HTTP waits for nothing.
            _, conn = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Connection(loop), sock=sock, ssl=tls, server_hostname=self.host if tls else None
                ),
                timeout if tls else None,
            )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"Connecting to {self.host}:{self.port} timed out.") from None
        except (OSError, ssl.SSLError) as exc:
            raise httpx.ConnectError(f"Could not connect to {self.host}:{self.port}: {exc}") from None
        return conn

    def release(self, conn: _Connection) -> None:
        self.active -= 1
        conn.busy = False
        if conn.reusable() and len(self.idle) < self.owner.max_keepalive:
            self.idle.append(conn)
        else:
            conn.close()
        self._wake_one()

    def _wake_one(self) -> None:
        while self.waiting:
            waiter = self.waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def close(self) -> None:
        for conn in self.idle:
            conn.close()
        self.idle.clear()


async def _open_socket(loop: asyncio.AbstractEventLoop, host: str, port: int, timeout: float | None) -> socket.socket:
    """A TCP socket connected to host:port, trying each address the host resolves to in turn, as
    loop.create_connection does. `timeout` bounds resolving a name (its answer comes from a thread
    through the loop, so a stalled loop can still make that wait look long), then the connect
    attempts together, measured from the first."""
    try:  # an IP address: no resolver, no thread, nothing to wait for
        infos = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV
        )
    except socket.gaierror:
        infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout)
    deadline = None if timeout is None else loop.time() + timeout
    errors: list[OSError] = []
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            await _connect_socket(loop, sock, address, None if deadline is None else max(deadline - loop.time(), 0.0))
        except OSError as exc:
            sock.close()
            if isinstance(exc, TimeoutError):  # the time is spent: no next address
                raise
            errors.append(exc)
        except BaseException:
            sock.close()
            raise
        else:
            return sock
    if not errors:
        raise OSError(f"{host} resolved to no address")
    try:
        raise errors[0] if len(errors) == 1 else OSError("; ".join(map(str, errors)))
    finally:
        # The error's traceback holds this frame, whose list holds the error: a
        # cycle that kept the whole request (its body, its context) until the
        # collector's next pass. As asyncio's create_connection does.
        errors.clear()


async def _connect_socket(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, address: Any, timeout: float | None
) -> None:
    """Connect the non-blocking `sock` to `address`, raising TimeoutError if the kernel has not
    connected it `timeout` seconds after the connect began.

    Why not asyncio.wait_for(loop.create_connection(...)): that timer measured the loop, not the
    connect. Under a burst the loop runs iterations lasting seconds, and a timer falling due while
    the connection's completion waits to be polled or processed decides first (libuv runs due
    timers before it polls; asyncio's wait_for looks before the connecting task has resumed), so
    connections the kernel had made were reported as timed out (docs/performance.md, issue 45;
    tests/passthru/test_wire_connect.py). Here the timer only wakes this up, and the socket itself
    says whether it connected."""
    try:
        sock.connect(address)
        return  # connected at once (loopback can)
    except (BlockingIOError, InterruptedError):
        pass  # in progress
    woken: asyncio.Future[None] = loop.create_future()
    loop.add_writer(sock, _set_done, woken)  # writable: connected or failed
    timer = None if timeout is None else loop.call_later(timeout, _set_done, woken)
    try:
        await woken
    finally:
        loop.remove_writer(sock)
        if timer is not None:
            timer.cancel()
    error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if error:
        raise OSError(error, os.strerror(error))
    try:
        sock.getpeername()
    except OSError:  # ENOTCONN: still connecting when the time was up
        raise TimeoutError from None


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Body(httpx.AsyncByteStream):
    def __init__(self, conn: _Connection, pool: _Pool, read_timeout: float | None) -> None:
        self.conn, self.pool, self.read_timeout = conn, pool, read_timeout
        self.released = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            while (chunk := await self.conn.next_chunk(self.read_timeout)) is not None:
                yield chunk
        except BaseException:
            self.conn.close()  # mid-body failure or cancellation: never reuse it
            raise

    async def aclose(self) -> None:
        if not self.released:
            self.released = True
            self.pool.release(self.conn)  # closes it unless the body was read to its end


@dataclass(frozen=True, slots=True)
class Target:
    """Where a provider URL's requests go: parsed once per URL, not per call."""

    scheme: str
    host: str
    port: int
    raw_path: bytes  # the request line's target: path and query
    netloc: bytes  # the Host header's value

    @classmethod
    def of(cls, url: httpx.URL) -> Target:
        """As `send` and httpx.Request read them from an httpx.URL."""
        port = url.port or (443 if url.scheme == "https" else 80)
        return cls(url.scheme, url.host, port, url.raw_path, url.netloc)


@dataclass(slots=True)
class Answer:
    """A whole answer (`Sent.read`): the body as it came, not decoded."""

    status: int
    headers: list[tuple[bytes, bytes]]  # as received: names' case and order kept
    body: bytes
    queued: float  # seconds the request waited for a connection


class Sent:
    """A request written on a connection, its answer not read yet. It holds
    the connection only, not the request."""

    def __init__(self, conn: _Connection, pool: _Pool, read_timeout: float | None) -> None:
        self.conn, self.pool, self.read_timeout = conn, pool, read_timeout

    async def read(self) -> Answer:
        """The whole answer, body read to its end; the connection is then
        released, kept for reuse only if the answer ended cleanly and may be
        kept alive, as `response()`'s body and its `aclose` do."""
        conn = self.conn
        try:
            await conn.read_headers(self.read_timeout)
            chunks = []
            while (chunk := await conn.next_chunk(self.read_timeout)) is not None:
                chunks.append(chunk)
            answer = Answer(conn.status, conn.raw_headers, b"".join(chunks), conn.queued)
        except BaseException:
            conn.close()  # a failure or cancellation before the end: never reuse it
            raise
        finally:
            self.pool.release(conn)
        return answer

    async def response(self) -> httpx.Response:
        """The answer's status and headers; its body streams from the connection."""
        conn = self.conn
        try:
            await conn.read_headers(self.read_timeout)
        except BaseException:
            conn.close()
            self.pool.release(conn)
            raise
        return httpx.Response(
            conn.status,
            headers=conn.raw_headers,
            stream=_Body(conn, self.pool, self.read_timeout),
            extensions={"http_version": b"HTTP/1.1", "queued_seconds": conn.queued},
        )


class LeanTransport(httpx.AsyncBaseTransport):
    """An httpx transport for plain HTTP/1.1 upstreams, one per event loop."""

    def __init__(
        self,
        *,
        max_connections: int = 512,
        max_keepalive: int = 128,
        on_queue: Callable[[int], None] | None = None,
        on_wait: Callable[[], None] | None = None,
        limit_name: str = "max_connections",
    ) -> None:
        self.max_connections = max_connections
        self.max_keepalive = max_keepalive
        self.ssl_context = httpx.create_ssl_context()
        self._pools: dict[tuple[str, str, int], _Pool] = {}
        self.on_queue = on_queue  # called with +1 / -1 as requests start and stop waiting for a connection
        # Called in a request's task as it starts waiting for a connection, pooled or
        # new: the network's time or another call's, none of this process's CPU.
        self.on_wait = on_wait
        self.limit_name = limit_name  # the setting to name in the warning
        self.queued = 0  # requests waiting for a connection now, all pools
        self._warned_at: float | None = None

    def waits(self) -> None:
        if self.on_wait is not None:
            self.on_wait()

    def queue_changed(self, delta: int, pool: _Pool) -> None:
        self.queued += delta
        if self.on_queue is not None:
            self.on_queue(delta)
        if not self.queued:
            return
        now = asyncio.get_running_loop().time()
        if self._warned_at is None or now - self._warned_at >= _WARN_EVERY:
            self._warned_at = now
            log.warning(
                "%d call(s) wait for a connection to %s:%s: this process holds %d, its limit (%s).",
                self.queued, pool.host, pool.port, pool.active, self.limit_name,
            )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        sent = await self.send(request)
        return await sent.response()

    async def send(self, request: httpx.Request) -> Sent:
        """Write `request` on a pooled connection; the result's `response()`
        then waits for the answer, and must be awaited at once (it releases
        the connection if that wait fails or is cancelled).

        Two steps, so that a caller need not hold the request while the
        provider thinks: a reasoning model may take minutes before its first
        byte, and a worker holds thousands of such calls (docs/performance.md)."""
        timeouts: dict[str, Any] = request.extensions.get("timeout", {})
        url = request.url
        pool = self._pool(url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        body = await request.aread()
        return await self._write(pool, request.method.encode(), url.raw_path, request.headers.raw, body, timeouts)

    async def post(
        self, target: Target, headers: list[tuple[bytes, bytes]], body: bytes, timeouts: Mapping[str, float | None]
    ) -> Sent:
        """Write a POST of `body` to `target`, the same bytes `send` writes for
        the httpx.Request of it: `headers` in their order (naming neither Host
        nor Content-Length), with Host put first and Content-Length last, as
        httpx.Request adds them. The result's `read()` (the whole answer) or
        `response()` (a stream) then waits for the answer, and must be awaited
        at once.

        Why: building the httpx.Request and reading the httpx.Response through
        httpx's iterators cost ~0.3 M of a plain call's 4.3 M instructions at
        c=1, 7 % (docs/performance.md): a plain call builds neither. A stream
        (passthru/upstream.py) builds no Request either: in a burst of 10,000
        streams it was ~7 % of taking each in. `send` stays the httpx
        transport's way in (`handle_async_request`)."""
        length = str(len(body)).encode()
        if body:
            lines = [(b"Host", target.netloc), *headers, (b"Content-Length", length)]
        else:  # httpx.Request puts a Content-Length of 0 right after Host
            lines = [(b"Host", target.netloc), (b"Content-Length", length), *headers]
        pool = self._pool(target.scheme, target.host, target.port)
        return await self._write(pool, b"POST", target.raw_path, lines, body, timeouts)

    def _pool(self, scheme: str, host: str, port: int) -> _Pool:
        pool = self._pools.get((scheme, host, port))
        if pool is None:
            pool = self._pools[scheme, host, port] = _Pool(scheme, host, port, self)
        return pool

    async def _write(
        self,
        pool: _Pool,
        method: bytes,
        path: bytes,
        headers: Iterable[tuple[bytes, bytes]],
        body: bytes,
        timeouts: Mapping[str, Any],
    ) -> Sent:
        head = [method, b" ", path, b" HTTP/1.1\r\n"]
        for name, value in headers:
            head += (name, b": ", value, b"\r\n")
        head.append(b"\r\n")
        conn = await pool.acquire(timeouts.get("pool"), timeouts.get("connect"))
        try:
            conn.send(b"".join(head) + body)
        except BaseException:
            conn.close()
            pool.release(conn)
            raise
        return Sent(conn, pool, timeouts.get("read"))

    async def aclose(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
