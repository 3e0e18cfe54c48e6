"""passthru/wire.py's connect on real loopback sockets, under both event loops Marina runs on
(asyncio's own, and uvloop in gunicorn's uvicorn workers): the connect timeout measures the
connect, not a stalled loop (issue 45's 504s); a connect that never completes, or a TLS handshake
that never ends, still times out; TLS, names and IPv6 connect."""
from __future__ import annotations

import asyncio
import datetime
import ipaddress
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvloop  # the workers' loop: uvicorn[standard] brings it (requirements.txt)

from passthru.wire import LeanTransport

LOOPS = [pytest.param(asyncio.new_event_loop, id="asyncio"), pytest.param(uvloop.new_event_loop, id="uvloop")]
CONNECT_TIMEOUT = 0.3
STALL = 0.6  # twice the connect timeout


def run(loop_factory: Callable[[], asyncio.AbstractEventLoop], coro: Coroutine[Any, Any, Any]) -> Any:
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(coro)


async def get(transport: LeanTransport, url: str) -> tuple[int, bytes]:
    timeout = httpx.Timeout(5, connect=CONNECT_TIMEOUT).as_dict()
    response = await transport.handle_async_request(httpx.Request("GET", url, extensions={"timeout": timeout}))
    try:
        return response.status_code, await response.aread()
    finally:
        await response.aclose()


def url(scheme: str, listener: socket.socket, host: str = "127.0.0.1") -> str:
    return f"{scheme}://{host}:{listener.getsockname()[1]}/v1/models"


class OneReply:
    """Answers one request on `listener` from a thread once `go` is set: until then the kernel
    alone makes a connection (it waits in the accept queue, accepted by nobody)."""

    def __init__(self, listener: socket.socket, tls: ssl.SSLContext | None = None) -> None:
        self.listener, self.tls = listener, tls
        self.go = threading.Event()
        listener.settimeout(10)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.go.wait(10)
        try:
            raw, _ = self.listener.accept()
            with self.tls.wrap_socket(raw, server_side=True) if self.tls else raw as conn:
                head = b""
                while b"\r\n\r\n" not in head and (data := conn.recv(4096)):
                    head += data
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        except OSError:
            pass  # the client gave up (the test fails on its own) or was never there

    def join(self) -> None:
        self.go.set()
        self.thread.join(10)


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield sock


@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[ssl.SSLContext, str]:
    """A server context with a self-signed certificate for 127.0.0.1 and localhost, and that
    certificate (PEM) for the client to trust."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "marina test upstream")])
    now = datetime.datetime.now(datetime.UTC)
    alt_names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder: Path = tmp_path_factory.mktemp("tls")
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    return server, (folder / "cert.pem").read_text()


def trusting(pem: str | None) -> LeanTransport:
    transport = LeanTransport()
    if pem is not None:
        transport.ssl_context.load_verify_locations(cadata=pem)  # httpx's own context, plus the test's certificate
    return transport


def stall_behind_the_first_step(listener: socket.socket, then: Callable[[], None]) -> None:
    """Block the running loop for STALL seconds right behind the call's first step, the one that
    starts its connect, as the first steps of the thousands of other calls of a burst did in
    issue 45: the loop's next turn comes past the connect timeout. Then `then()`."""

    def stall() -> None:
        time.sleep(STALL)
        then()

    asyncio.get_running_loop().call_soon(stall)


def stall_once_connected(listener: socket.socket, then: Callable[[], None]) -> None:
    """Block the running loop for STALL seconds as soon as the kernel has completed a connection
    to `listener` (it is in the accept queue): the loop sleeps through the connection's
    completion and past the connect timeout. Then `then()`."""
    loop = asyncio.get_running_loop()

    def check() -> None:
        if select.select([listener], [], [], 0)[0]:
            time.sleep(STALL)
            then()
        else:
            loop.call_soon(check)

    loop.call_soon(check)


@pytest.mark.parametrize("loop_factory", LOOPS)
@pytest.mark.parametrize("scheme", ["http", "https"])
@pytest.mark.parametrize("stall", [stall_behind_the_first_step, stall_once_connected], ids=lambda f: f.__name__)
def test_a_connection_made_while_the_loop_stalls_is_used_not_timed_out(
    loop_factory, scheme, stall, listener, tls_pair
):
    """Before the fix (asyncio.wait_for around loop.create_connection) each of these was an
    httpx.ConnectTimeout under both loops, the connection made all along."""
    server_tls, pem = tls_pair
    server = OneReply(listener, server_tls if scheme == "https" else None)

    async def go() -> tuple[tuple[int, bytes], float]:
        transport = trusting(pem if scheme == "https" else None)
        started = time.monotonic()
        call = asyncio.ensure_future(get(transport, url(scheme, listener)))
        stall(listener, then=server.go.set)  # queued behind the call's first step
        try:
            return await call, time.monotonic() - started
        finally:
            await transport.aclose()

    try:
        reply, took = run(loop_factory, go())
    finally:
        server.join()
    assert reply == (200, b"ok")
    assert took >= STALL  # the stall fell inside the call, past its connect timeout


async def seconds_to_fail(
    target: str, error: type[Exception], match: str | None = None, *, stall: bool = False
) -> float:
    """How long a GET of `target` takes to raise `error` (its message matching `match`); with `stall`,
    the loop is blocked for STALL seconds just after the call begins."""
    transport = LeanTransport()
    if stall:
        asyncio.get_running_loop().call_later(0.05, time.sleep, STALL)
    started = time.monotonic()
    try:
        with pytest.raises(error, match=match):
            await get(transport, target)
        return time.monotonic() - started
    finally:
        await transport.aclose()


@pytest.mark.parametrize("loop_factory", LOOPS)
@pytest.mark.parametrize("stalled", [False, True], ids=["running", "stalled"])
def test_a_connect_nobody_answers_is_a_connect_timeout(loop_factory, stalled, unanswered):
    """The socket decides both ways: one still connecting when the time is up is a timeout, stall or not."""
    host, port = unanswered
    failing = seconds_to_fail(
        f"http://{host}:{port}/v1/models", httpx.ConnectTimeout, f"Connecting to {host}:{port} timed out", stall=stalled
    )
    took = run(loop_factory, failing)
    assert CONNECT_TIMEOUT * 0.9 <= took < (STALL if stalled else CONNECT_TIMEOUT) + 0.5


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_a_tls_handshake_nobody_answers_is_a_connect_timeout(loop_factory, listener):
    """TCP connects (the kernel queues it), the TLS handshake waits for an answer that never comes."""
    took = run(loop_factory, seconds_to_fail(url("https", listener), httpx.ConnectTimeout))
    assert CONNECT_TIMEOUT * 0.9 <= took < CONNECT_TIMEOUT + 0.5


@pytest.mark.parametrize("loop_factory", LOOPS)
def test_nobody_listening_is_a_connect_error_at_once(loop_factory):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    target = f"http://127.0.0.1:{port}/v1/models"
    failing = seconds_to_fail(target, httpx.ConnectError, f"Could not connect to 127.0.0.1:{port}: ")
    assert run(loop_factory, failing) < CONNECT_TIMEOUT


def ipv6_listener() -> socket.socket:
    try:
        return socket.create_server(("::1", 0), family=socket.AF_INET6)
    except OSError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")


@pytest.mark.parametrize("loop_factory", LOOPS)
@pytest.mark.parametrize("host", ["localhost", "[::1]"])
def test_a_name_and_an_ipv6_address_connect(loop_factory, host):
    """A name goes through the resolver (and each address it gives is tried in turn: localhost
    may give ::1 first, where nothing listens); an IPv6 literal needs none."""
    with ipv6_listener() if host == "[::1]" else socket.create_server(("127.0.0.1", 0)) as listener:
        server = OneReply(listener)
        server.go.set()

        async def go() -> tuple[int, bytes]:
            transport = LeanTransport()
            try:
                return await get(transport, url("http", listener, host))
            finally:
                await transport.aclose()

        try:
            assert run(loop_factory, go()) == (200, b"ok")
        finally:
            server.join()
