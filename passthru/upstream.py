"""The one doorway for upstream HTTP. Nothing else in Marina imports httpx
(passthru/wire.py, the transport beneath it, is part of this doorway).

Requests go straight to a transport, one per event loop (a gunicorn worker
has one loop, so in production: one per process): the lean HTTP/1.1
transport of passthru/wire.py, or the one tests inject. The client layer of
httpx (cookie jar, auth and redirect machinery) is skipped, as Marina uses
none of it; its default headers are kept, so providers see the same request.
The lean transport writes the bytes an httpx.Request would make without
making one; a plain call (`post_chat`, its answer read whole) skips httpx's
Response too: the transport hands back the answer's bytes, which httpx still
decodes when they come with a Content-Encoding (`_reply`); a stream's answer
is an httpx.Response read as it comes. When an environment proxy
(HTTPS_PROXY and friends, minus NO_PROXY) applies to a provider, its calls go
through a regular `httpx.AsyncClient`, which knows proxies. Explicit timeouts,
provider auth, and every transport failure turned into `UpstreamError` with a
short kind that traces record."""
from __future__ import annotations

import asyncio
import logging
import resource
import urllib.request
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import httpx
from django.conf import settings

from passthru import admission
from passthru.errors import UpstreamError
from passthru.providers import Provider
from passthru.wire import Answer, LeanTransport, Sent, Target

log = logging.getLogger(__name__)

_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()
_lean: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LeanTransport] = weakref.WeakKeyDictionary()
_transport: httpx.AsyncBaseTransport | None = None

# Headers a client sent that may go upstream as they are. The client's
# Authorization never does: the provider gets its own key.
_FORWARDED_HEADERS = ("x-request-id", "user-agent", "http-referer", "x-title")
# The endpoint a call goes to, under the provider's base URL: each /v1 door
# names its own (passthru/doors/); chat completions unless told otherwise.
CHAT = "chat/completions"
# Anthropic's Messages API (passthru/doors/messages.py): its version and beta
# headers are the client's to choose, and Anthropic itself wants its key in
# x-api-key (OpenRouter's /messages takes the usual Bearer).
ANTHROPIC_HEADERS = ("anthropic-version", "anthropic-beta")
ANTHROPIC_VERSION = "2023-06-01"


def use_transport(transport: httpx.AsyncBaseTransport | None) -> None:
    """Tests inject a transport (e.g. httpx.MockTransport); None restores the network."""
    global _transport
    _transport = transport
    _clients.clear()
    _lean.clear()


def _timeout() -> httpx.Timeout:
    return httpx.Timeout(
        settings.MARINA_UPSTREAM_TIMEOUT,
        connect=min(settings.MARINA_UPSTREAM_CONNECT_TIMEOUT, settings.MARINA_UPSTREAM_TIMEOUT),
        pool=settings.MARINA_UPSTREAM_POOL_TIMEOUT,
    )


# Idle connections kept per provider between bursts.
MAX_KEEPALIVE = 128
# File descriptors a worker keeps for everything but its calls (database,
# listeners, logs, metrics files); a streamed call holds two (client, provider).
_RESERVED_FDS = 256
# The pool's size when the descriptors have no limit at all (RLIM_INFINITY).
_NO_FD_LIMIT = 1 << 20


def _fd_room() -> int:
    """Connections this process's file-descriptor limit leaves room for."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return _NO_FD_LIMIT if soft == resource.RLIM_INFINITY else max(16, (soft - _RESERVED_FDS) // 2)


def _pool_size() -> tuple[int, bool]:
    """The pool's size, and whether MARINA_UPSTREAM_MAX_CONNECTIONS set it: it
    does when set (not 0) and within what the file-descriptor limit leaves room
    for; else the pool is that room."""
    wanted, room = settings.MARINA_UPSTREAM_MAX_CONNECTIONS, _fd_room()
    return (int(wanted), True) if 0 < wanted <= room else (room, False)


def max_connections() -> int:
    """The pool's size (`_pool_size`): past the descriptors' room, accepting
    clients and opening files would fail instead of calls waiting for a
    connection, so a larger setting is lowered to it, with a warning."""
    size, by_setting = _pool_size()
    wanted = settings.MARINA_UPSTREAM_MAX_CONNECTIONS
    if wanted and not by_setting:
        log.warning(
            "MARINA_UPSTREAM_MAX_CONNECTIONS=%d is more than this process's file-descriptor limit leaves room "
            "for; using %d. Raise the limit (ulimit -n) to use more.",
            wanted, size,
        )
    return size


def _pool_size_named() -> str:
    """The pool's size and what set it, for a refused call's message."""
    size, by_setting = _pool_size()
    if by_setting:
        return f"{size} connection(s) to it (MARINA_UPSTREAM_MAX_CONNECTIONS={size})"
    return (f"{size} connections to it (what its file-descriptor limit leaves room for; "
            "MARINA_UPSTREAM_MAX_CONNECTIONS=N sets fewer)")


def client() -> httpx.AsyncClient:
    """The httpx client for providers behind an environment proxy."""
    loop = asyncio.get_running_loop()
    existing = _clients.get(loop)
    if existing is None:
        existing = httpx.AsyncClient(
            transport=_transport,
            timeout=_timeout(),
            limits=httpx.Limits(max_connections=max_connections(), max_keepalive_connections=MAX_KEEPALIVE),
            follow_redirects=False,
        )
        _clients[loop] = existing
    return existing


_queue_watchers: list[Callable[[int], None]] = []


def watch_queue(watcher: Callable[[int], None]) -> None:
    """Call watcher(+1 / -1) as calls start and stop waiting for a pooled connection.
    observability registers its gauge here (its AppConfig.ready), so passthru runs without it."""
    _queue_watchers.append(watcher)


def _tell_queue(delta: int) -> None:
    for watcher in _queue_watchers:
        watcher(delta)


@lru_cache(maxsize=64)
def _proxied(base_url: str) -> bool:
    """Whether an environment proxy applies to this base URL (as httpx would use it)."""
    url = httpx.URL(base_url)
    proxies = urllib.request.getproxies()
    if not (proxies.get(url.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(url.host)


@lru_cache(maxsize=1)
def _default_headers() -> tuple[tuple[bytes, bytes], ...]:
    # What httpx.AsyncClient adds to every request (Accept, Accept-Encoding,
    # Connection, User-Agent): providers keep seeing the same headers. Given a
    # transport, the client builds none of its own: a default one would import
    # httpcore (h11, h2) and load the CA bundle, 3.1 MB a worker kept for
    # nothing (docs/performance.md).
    return tuple(httpx.AsyncClient(transport=httpx.AsyncBaseTransport()).headers.raw)


class _OneStep:
    """The POST of a transport that writes and answers in one call (a test's,
    or httpx's client behind a proxy): both happen in `response()`, which holds
    the request meanwhile."""

    def __init__(self, answer: Callable[[], Awaitable[httpx.Response]]) -> None:
        self._answer = answer

    async def response(self) -> httpx.Response:
        return await self._answer()


async def _start(provider: Provider, body: bytes, headers: dict[str, str], path: str = CHAT) -> Sent | _OneStep:
    """The POST written to the provider (on the lean transport, without an
    httpx.Request); the result's `response()` (a stream) or, on the lean
    transport, `read()` (an answer read whole, `_post`), to be awaited at
    once, waits for the answer. Until then the caller may let go of `body`:
    nothing here keeps it once it is written. Either way the request's turn
    ends here (passthru/admission.py)."""
    try:
        return await _write(provider, body, headers, path)
    finally:
        admission.leave()


async def _write(provider: Provider, body: bytes, headers: dict[str, str], path: str) -> Sent | _OneStep:
    url = f"{provider.base_url}/{path}"
    if _transport is None and _proxied(provider.base_url):
        proxied = client()
        request = proxied.build_request("POST", url, content=body, headers=headers)
        return _OneStep(lambda: proxied.send(request, stream=True))
    if _transport is not None:
        injected, ready = _transport, _request(url, headers, body)
        return _OneStep(lambda: injected.handle_async_request(ready))
    loop = asyncio.get_running_loop()
    transport = _lean.get(loop)
    if transport is None:
        transport = _lean[loop] = LeanTransport(
            max_connections=max_connections(),
            max_keepalive=MAX_KEEPALIVE,
            on_queue=_tell_queue,
            # Waiting for a connection (a TLS handshake may take a provider's round
            # trips), a request has nothing for this worker to do: its turn ends.
            on_wait=admission.leave_soon,
            limit_name="MARINA_UPSTREAM_MAX_CONNECTIONS",
        )
    # The bytes httpx.Request would make, without making one: building it was
    # ~7 % of a streamed call's intake in a burst of 10,000 (docs/performance.md).
    return await transport.post(_target(url), _merged(headers), body, _timeout().as_dict())


def _request(url: str, headers: dict[str, str], body: bytes) -> httpx.Request:
    """The POST as httpx.AsyncClient would build it: its default headers, ours over them, the timeouts."""
    return httpx.Request(
        "POST", _url(url), headers=_merged(headers), content=body, extensions={"timeout": _timeout().as_dict()}
    )


def _merged(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    """httpx.AsyncClient's default headers, then ours, which replace those of the same name."""
    ours = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
    named = {name.lower() for name, _ in ours}
    return [pair for pair in _default_headers() if pair[0].lower() not in named] + ours


@lru_cache(maxsize=64)
def _url(url: str) -> httpx.URL:
    return httpx.URL(url)  # parsed once per provider, not per call


@lru_cache(maxsize=64)
def _target(url: str) -> Target:
    return Target.of(_url(url))


@dataclass
class Reply:
    status: int
    body: bytes
    content_type: str
    queued: float = 0.0  # seconds spent waiting for a free connection to the provider
    retry_after: str = ""  # the provider's Retry-After (passed on with its 429)

    def json(self) -> Any:
        import json

        return json.loads(self.body)


def _headers(provider: Provider, incoming: Mapping[str, str], path: str = CHAT) -> dict[str, str]:
    headers = {"content-type": "application/json"}
    for name in _FORWARDED_HEADERS:
        if name in incoming:
            headers[name] = incoming[name]
    if path == "messages":
        for name in ANTHROPIC_HEADERS:
            if name in incoming:
                headers[name] = incoming[name]
        if provider.name == "anthropic":
            headers.setdefault("anthropic-version", ANTHROPIC_VERSION)
            if provider.api_key:
                headers["x-api-key"] = provider.api_key
            return headers
    if provider.api_key:
        headers["authorization"] = f"Bearer {provider.api_key}"
    return headers


def _queued(response: httpx.Response) -> float:
    return float(response.extensions.get("queued_seconds", 0.0))


def _failure(provider: Provider, exc: Exception) -> UpstreamError:
    if isinstance(exc, httpx.PoolTimeout):
        return UpstreamError(
            provider.name,
            "pool_timeout",
            f"No connection to provider '{provider.name}' became free within "
            f"MARINA_UPSTREAM_POOL_TIMEOUT={settings.MARINA_UPSTREAM_POOL_TIMEOUT:g}s: this worker holds "
            f"{_pool_size_named()}, all busy.",
            status=503,
        )
    if isinstance(exc, httpx.ConnectTimeout):
        connect = _timeout().connect  # the connect timeout the call had
        return UpstreamError(
            provider.name,
            "timeout",
            f"Could not connect to provider '{provider.name}' within {connect:g}s "
            f"(MARINA_UPSTREAM_CONNECT_TIMEOUT={settings.MARINA_UPSTREAM_CONNECT_TIMEOUT:g}s).",
            status=504,
        )
    if isinstance(exc, httpx.TimeoutException):
        idle = settings.MARINA_UPSTREAM_TIMEOUT
        return UpstreamError(
            provider.name,
            "timeout",
            f"Provider '{provider.name}' sent nothing for {idle:g}s (MARINA_UPSTREAM_TIMEOUT={idle:g}s).",
            status=504,
        )
    if isinstance(exc, httpx.DecodingError):
        return UpstreamError(
            provider.name, "bad_encoding", f"Provider '{provider.name}' sent a compressed body that could not be decoded."
        )
    if isinstance(exc, httpx.ConnectError):
        return UpstreamError(provider.name, "connect", f"Could not connect to provider '{provider.name}'.")
    return UpstreamError(
        provider.name, "reset", f"Provider '{provider.name}' closed the connection ({type(exc).__name__})."
    )


async def post_chat(provider: Provider, body: bytes, incoming: Mapping[str, str], path: str = CHAT) -> Reply:
    """POST a chat completion (or another door's request: `path`) and read the whole reply, within
    MARINA_UPSTREAM_DEADLINE in all: the idle timeout alone
    (MARINA_UPSTREAM_TIMEOUT) lets a provider that trickles a byte now and
    then hold the call for ever."""
    headers = _headers(provider, incoming, path)
    deadline = settings.MARINA_UPSTREAM_DEADLINE
    try:
        async with asyncio.timeout(deadline):
            return await _post(provider, body, headers, path)
    except TimeoutError:
        raise UpstreamError(
            provider.name,
            "timeout",
            f"Provider '{provider.name}' did not finish its answer in {deadline:g}s (MARINA_UPSTREAM_DEADLINE={deadline:g}s).",
            status=504,
        ) from None


async def _post(provider: Provider, body: bytes, headers: dict[str, str], path: str = CHAT) -> Reply:
    """A connect error is retried once: the request never left, so it is safe."""
    for attempt in (1, 2):
        try:
            sent = await _start(provider, body, headers, path)
            if isinstance(sent, Sent):  # the lean transport: no httpx.Response either
                return _reply(await sent.read())
            response = await sent.response()
            try:
                content = await response.aread()
            finally:
                await response.aclose()
            return Reply(
                response.status_code, content, response.headers.get("content-type", ""), _queued(response),
                response.headers.get("retry-after", ""),
            )
        except httpx.ConnectError as exc:
            if attempt == 2:
                raise _failure(provider, exc) from None
        except httpx.HTTPError as exc:
            raise _failure(provider, exc) from None
    raise AssertionError("unreachable")


def _reply(answer: Answer) -> Reply:
    """The Reply httpx.Response would have given for this answer. A body with
    a Content-Encoding is decoded by httpx itself, the one way to decode it as
    it does (gzip, deflate; br and zstd when installed; an unknown coding left
    as it is), raising its DecodingError on a body that does not decode."""
    content = answer.body
    if any(name.lower() == b"content-encoding" for name, _ in answer.headers):
        content = httpx.Response(answer.status, headers=answer.headers, content=content).content
    return Reply(
        answer.status, content, _header(answer.headers, b"content-type"), answer.queued,
        _header(answer.headers, b"retry-after"),
    )


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str:
    """The value of header `name` (lower case) as httpx's `headers.get(name, "")`
    reads it: all of that name, joined by ", "."""
    values = [value for key, value in headers if key.lower() == name]
    if all(value.isascii() for value in values):
        return ", ".join([value.decode("ascii") for value in values])
    return httpx.Headers(headers).get(name.decode(), "")  # the encoding httpx guesses from all headers


class Stream:
    """An open streaming response: status first, then its body in chunks.
    No deadline: a stream may run as long as it keeps sending; only the idle
    timeout (MARINA_UPSTREAM_TIMEOUT) applies, before the first byte and between bytes.

    `await stream.open()`, then `aclose()` whatever happens, so a cancelled
    client never leaks a connection (passthru/calls.py call_stream: no
    AsyncExitStack around it, whose deque is ~0.7 KB of each of the thousands
    of streams a worker may hold; docs/performance.md, issue 45)."""

    def __init__(self, provider: Provider, body: bytes, incoming: Mapping[str, str], path: str = CHAT) -> None:
        self.provider = provider
        self._body = body
        self._path = path
        # No compression on streams: a compressor holds events back until its
        # block fills, and the events are relayed (and metered) as they come.
        # A provider that compresses anyway is decoded in chunks().
        self._headers = {**_headers(provider, incoming, path), "accept-encoding": "identity"}
        self._response: httpx.Response | None = None

    async def open(self) -> Stream:
        """Send the request and read the response's status line and headers."""
        try:
            sent = await _start(self.provider, self._body, self._headers, self._path)
            # The provider has the body: it is not kept while the stream waits
            # for its first byte, which a reasoning model may take minutes to
            # send, with thousands of streams waiting (docs/performance.md).
            self._body = b""
            self._response = await sent.response()
        except httpx.HTTPError as exc:
            raise _failure(self.provider, exc) from None
        return self

    async def aclose(self) -> None:
        if self._response is not None:
            await self._response.aclose()

    @property
    def status(self) -> int:
        assert self._response is not None
        return self._response.status_code

    @property
    def content_type(self) -> str:
        assert self._response is not None
        return self._response.headers.get("content-type", "")

    @property
    def retry_after(self) -> str:
        assert self._response is not None
        return self._response.headers.get("retry-after", "")

    @property
    def queued(self) -> float:
        """Seconds spent waiting for a free connection to the provider."""
        assert self._response is not None
        return _queued(self._response)

    async def read(self) -> bytes:
        assert self._response is not None
        try:
            return await self._response.aread()
        except httpx.HTTPError as exc:
            raise _failure(self.provider, exc) from None

    async def chunks(self) -> AsyncIterator[bytes]:
        # No retry here: once a stream has started, a retry would duplicate output.
        assert self._response is not None
        try:
            async for chunk in self._response.aiter_bytes():  # decoded: the client gets no Content-Encoding
                yield chunk
        except httpx.HTTPError as exc:
            raise _failure(self.provider, exc) from None


def open_stream(provider: Provider, body: bytes, incoming: Mapping[str, str], path: str = CHAT) -> Stream:
    return Stream(provider, body, incoming, path)
