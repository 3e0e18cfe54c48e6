"""The one doorway for upstream HTTP. Nothing else in Marina imports httpx.

One long-lived `httpx.AsyncClient` per event loop (a gunicorn worker has one
loop, so in production: one per process), explicit timeouts, provider auth,
and every transport failure turned into `UpstreamError` with a short kind
that traces record."""
from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from django.conf import settings

from passthru.errors import UpstreamError
from passthru.providers import Provider

_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = weakref.WeakKeyDictionary()
_transport: httpx.AsyncBaseTransport | None = None

# Headers a client sent that may go upstream as they are. The client's
# Authorization never does: the provider gets its own key.
_FORWARDED_HEADERS = ("x-request-id", "user-agent", "http-referer", "x-title")


def use_transport(transport: httpx.AsyncBaseTransport | None) -> None:
    """Tests inject a transport (e.g. httpx.MockTransport); None restores the network."""
    global _transport
    _transport = transport
    _clients.clear()


def client() -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    existing = _clients.get(loop)
    if existing is None:
        existing = httpx.AsyncClient(
            transport=_transport,
            timeout=httpx.Timeout(
                settings.MARINA_UPSTREAM_TIMEOUT,
                connect=min(settings.MARINA_UPSTREAM_CONNECT_TIMEOUT, settings.MARINA_UPSTREAM_TIMEOUT),
            ),
            # Many concurrent agent conversations share a few providers.
            limits=httpx.Limits(max_connections=512, max_keepalive_connections=128),
            follow_redirects=False,
        )
        _clients[loop] = existing
    return existing


@dataclass
class Reply:
    status: int
    body: bytes
    content_type: str

    def json(self) -> Any:
        import json

        return json.loads(self.body)


def _headers(provider: Provider, incoming: Mapping[str, str]) -> dict[str, str]:
    headers = {"content-type": "application/json"}
    for name in _FORWARDED_HEADERS:
        if name in incoming:
            headers[name] = incoming[name]
    if provider.api_key:
        headers["authorization"] = f"Bearer {provider.api_key}"
    return headers


def _failure(provider: Provider, exc: Exception) -> UpstreamError:
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamError(
            provider.name,
            "timeout",
            f"Provider '{provider.name}' did not answer in time "
            f"(MARINA_UPSTREAM_TIMEOUT={settings.MARINA_UPSTREAM_TIMEOUT:g}s).",
            status=504,
        )
    if isinstance(exc, httpx.ConnectError):
        return UpstreamError(provider.name, "connect", f"Could not connect to provider '{provider.name}'.")
    return UpstreamError(
        provider.name, "reset", f"Provider '{provider.name}' closed the connection ({type(exc).__name__})."
    )


async def post_chat(provider: Provider, body: bytes, incoming: Mapping[str, str]) -> Reply:
    """POST a chat completion and read the whole reply.

    A connect error is retried once: the request never left, so it is safe."""
    url = f"{provider.base_url}/chat/completions"
    headers = _headers(provider, incoming)
    for attempt in (1, 2):
        try:
            response = await client().post(url, content=body, headers=headers)
            return Reply(response.status_code, response.content, response.headers.get("content-type", ""))
        except httpx.ConnectError as exc:
            if attempt == 2:
                raise _failure(provider, exc) from None
        except httpx.HTTPError as exc:
            raise _failure(provider, exc) from None
    raise AssertionError("unreachable")


class Stream:
    """An open streaming response: status first, then raw chunks.

    Use as `async with open_stream(...) as stream:`; the response is closed in
    __aexit__ whatever happens, so a cancelled client never leaks a connection."""

    def __init__(self, provider: Provider, body: bytes, incoming: Mapping[str, str]) -> None:
        self.provider = provider
        self._request = client().build_request(
            "POST", f"{provider.base_url}/chat/completions", content=body, headers=_headers(provider, incoming)
        )
        self._response: httpx.Response | None = None

    async def __aenter__(self) -> Stream:
        try:
            self._response = await client().send(self._request, stream=True)
        except httpx.HTTPError as exc:
            raise _failure(self.provider, exc) from None
        return self

    async def __aexit__(self, *exc_info: object) -> None:
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
            async for chunk in self._response.aiter_raw():
                yield chunk
        except httpx.HTTPError as exc:
            raise _failure(self.provider, exc) from None


def open_stream(provider: Provider, body: bytes, incoming: Mapping[str, str]) -> Stream:
    return Stream(provider, body, incoming)
