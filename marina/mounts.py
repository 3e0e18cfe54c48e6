"""Django serves /v1 from its own handler: the NinjaAPI behind the middleware
the API uses, with no thread hop on the way.

Why (docs/performance.md, issue 19): through Django's whole site, the chat
route cost 6.7–8.5 ms of CPU per call against ~1.5 ms for the work itself.
Under ASGI every `MiddlewareMixin` hook runs in a worker thread
(`sync_to_async`), WhiteNoise is sync-only, and the request_started/finished
signals and `response.close()` are sent from a thread too, a new one per
request (Django's ThreadSensitiveContext). /v1 reads no session, cookie, CSRF
token, user or message, so its handler has none of those middleware:

- `ApiHandler` is Django's ASGIHandler with one middleware, `InlineMiddleware`,
  which runs the hooks of the header middleware the site lists in
  `settings.MIDDLEWARE` (SecurityMiddleware, CommonMiddleware,
  XFrameOptionsMiddleware: the API's security headers, Content-Length, the
  Host check, SSL redirect and HSTS when set) on the event loop, in Django's
  order. Those hooks only read the request and set headers, so they need no
  thread. The answers are the whole site's, header for header
  (tests/marina/test_one_door.py).
- It sends no request_started/finished signal and does not call
  `response.close()` (whose only work for /v1's responses is sending
  request_finished). Django's receivers (close_old_connections,
  reset_queries, close_caches) act on the connections and caches of the thread
  they run in, and Django sends them from a fresh thread per request: one
  that never served a query. /v1's queries run on threads of their own (the
  ledger writer, the key and rate-limit lookups), which manage their
  connections themselves. A receiver connected to those signals does not hear
  /v1 requests; the rest of the site is unchanged.
- It sends a stream itself (`send_response`): Django's keeps the headers and
  two async generators of its own for as long as the stream lasts, ~4 KB of
  each of the thousands of streams a worker may hold (issue 45).

A door's POST (chat completions, responses, embeddings, messages) that the
header middleware would let through unchanged, as every request does with the
settings Marina ships, goes further (`passes_through`): no Django request, no
Ninja operation, no HttpResponse, ~0.2 ms of a call's CPU at c=1 (issue 45).
The core answers from the ASGI scope (passthru/api.py `answer_scope`) and its
answer is sent with the headers those middleware add, got by running their
own hooks once. Any setting that makes them act on a request, or a host they
would refuse, and the request takes Django's way above.

`Doors` sends /v1/ to that handler and everything else (admin, reports, the
OpenAPI schema and docs, static files) to Django's usual one. Benchmark
uploads (/v1/benchmarks/) stay with the site's handler: their import runs in a
request thread (`sync_to_async`), whose connection request_finished closes."""
from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable, Sequence
from contextlib import aclosing
from functools import lru_cache
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.exception import convert_exception_to_response, response_for_exception
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.http.request import split_domain_port, validate_host
from django.http.response import ResponseHeaders
from django.urls import ResolverMatch, URLResolver, get_resolver, set_script_prefix
from django.utils.log import log_response
from django.utils.module_loading import import_string

from passthru import admission
from passthru.api import answer_scope, unexpected
from passthru.intake import BODY, CHAT_PATH, DOOR_PATHS, HEADERS, ASGIApp, Receive, Scope, Send
from passthru.outbound import Outbound

API_PREFIX = "/v1/"
SITE_UNDER_API = "/v1/benchmarks/"  # the NinjaAPI's upload routes, served with the site
GONE = "marina.client_gone"  # set in a request's scope once its client has disconnected

# Middleware whose hooks only look at the request and set headers: run inline
# for /v1, when the site lists them (so the settings that drive them, and
# removing one from MIDDLEWARE, apply to the API too).
HEADER_MIDDLEWARE = (
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
)

GetResponse = Callable[[HttpRequest], Awaitable[HttpResponseBase]]


def api_middleware() -> list[str]:
    """The site's header middleware, in the site's order: what /v1 runs."""
    return [path for path in settings.MIDDLEWARE if path in HEADER_MIDDLEWARE]


class InlineMiddleware:
    """Django middleware hooks run on the event loop, with Django's semantics:
    process_request outermost first (a response from one skips the view),
    process_response innermost first, from the layer that answered outwards,
    and an exception in a hook becomes that layer's error response."""

    sync_capable = False
    async_capable = True

    def __init__(self, get_response: GetResponse, paths: Sequence[str]) -> None:
        self.get_response = get_response
        self.layers: list[Any] = [import_string(path)(get_response) for path in paths]

    async def __call__(self, request: HttpRequest) -> HttpResponseBase:
        entered: list[Any] = []
        response: HttpResponseBase | None = None
        for layer in self.layers:
            hook = getattr(layer, "process_request", None)
            try:
                response = hook(request) if hook else None
            except Exception as exc:
                response = await _error_response(request, exc)
                break
            entered.append(layer)
            if response is not None:
                break
        if response is None:
            response = await self.get_response(request)
        for layer in reversed(entered):
            hook = getattr(layer, "process_response", None)
            if hook:
                try:
                    response = hook(request, response)
                except Exception as exc:
                    response = await _error_response(request, exc)
        return response


async def _error_response(request: HttpRequest, exc: Exception) -> HttpResponseBase:
    # As Django's convert_exception_to_response does for an async layer (an
    # error page may render a template: off the loop).
    response: HttpResponseBase = await sync_to_async(response_for_exception, thread_sensitive=False)(request, exc)
    return response


class ApiHandler(ASGIHandler):
    """Django's ASGI handler for /v1: InlineMiddleware as its only middleware,
    no request signals."""

    def load_middleware(self, is_async: bool = False) -> None:
        # Where Django's loader would build the chain from settings.MIDDLEWARE.
        self._view_middleware: list[Any] = []
        self._template_response_middleware: list[Any] = []
        self._exception_middleware: list[Any] = []
        view: GetResponse = convert_exception_to_response(self._get_response_async)  # type: ignore[attr-defined,assignment]
        self._inline = InlineMiddleware(view, api_middleware())
        self._middleware_chain = convert_exception_to_response(self._inline)
        self._added: tuple[int, list[tuple[str, str]]] | None = None  # _middleware_headers

    def resolve_request(self, request: HttpRequest) -> ResolverMatch:
        # Django walks the site's patterns (admin, reports, the NinjaAPI's
        # routes) for every request; /v1 has a handful of paths, each resolved
        # the same way every time: 40-80 µs of a call at c=1 (docs/performance.md).
        if hasattr(request, "urlconf"):  # set by a middleware: Django's way
            return super().resolve_request(request)
        match = _resolved(get_resolver(), request.path_info)
        request.resolver_match = match
        return match

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The view takes the body out of the scope (passthru/api.py), and the
        # door lets go of it once parsed: the request would keep it for as
        # long as the answer lasts, minutes for a stream waiting on a
        # reasoning model, thousands at once (docs/performance.md, issue 45).
        # The request gets an empty body.
        try:
            scope[BODY] = await _read_body(receive)
        except RequestAborted:
            return
        # As Django's handler does: a client that disconnects cancels the view
        # (a stream is then traced `cancelled`), or its wait for a turn.
        task = asyncio.current_task()
        watcher = asyncio.create_task(_cancel_on_disconnect(receive, task, scope))
        turn = None
        try:
            # A call (the doors are /v1's POSTs) waits its turn, in the order calls
            # came (passthru/admission.py): given back once its provider has it, or
            # at the latest here at its end. Reads (health, models, the ledger's
            # API) never queue behind a burst of calls. Django's request is made
            # once the turn is taken: in a burst thousands wait, holding their
            # body's bytes and no more.
            if scope["method"] == "POST":
                turn = await admission.enter()
            await self._respond(scope, send)
        except asyncio.CancelledError:
            if not scope.get(GONE) or task is None:
                raise
            task.uncancel()
        finally:
            if turn is not None:
                turn.leave()
            watcher.cancel()

    async def send_response(self, response: HttpResponseBase, send: Send) -> None:
        """Django's, for a stream, without what Django's keeps for the
        stream's whole length: the headers (the response's and the list sent,
        in Django's frame) and two async generators around the stream
        (`StreamingHttpResponse.__aiter__` and `streaming_content`'s wrapper,
        which makes each part bytes: /v1's streams yield bytes). A reasoning
        model's stream lasts minutes and a worker holds thousands: ~4 KB each
        (docs/performance.md, issue 45). The same messages; other responses
        are Django's."""
        if not (isinstance(response, StreamingHttpResponse) and response.is_async):
            await super().send_response(response, send)
            return
        await send({"type": "http.response.start", "status": response.status_code, "headers": _header_list(response)})
        response.headers = ResponseHeaders({})  # sent: nothing reads them again
        # The stream the response was given (Django keeps it there: _set_streaming_content).
        async with aclosing(response._iterator) as parts:  # type: ignore[attr-defined]
            async for part in parts:
                await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body"})

    async def _respond(self, scope: Scope, send: Send) -> None:
        if passes_through(scope):
            # The headers are handed on unnamed: _send_outbound lets go of them once
            # sent, and nothing here holds them for the stream's minutes (a worker
            # holds thousands; ~1.5 KB each: docs/performance.md, issue 45).
            await _send_outbound(*self._answered(scope, await answer_scope(scope)), send)
            return
        set_script_prefix(get_script_prefix(scope))
        request, error_response = self.create_request(scope, io.BytesIO())
        if request is None:
            assert error_response is not None
            await self.send_response(error_response, send)
            return
        await self.send_response(await self.run_get_response(request), send)

    def _answered(self, scope: Scope, out: Outbound) -> tuple[Outbound, list[tuple[bytes, bytes]]]:
        """The core's answer and its headers; logged as Django's handler logs a 4xx or 5xx."""
        try:
            headers = self._headers_of(scope, out)
        except Exception as exc:  # a header Django refuses: the 500 the view's response would have been
            out = unexpected(scope["method"], scope["path"], exc)
            headers = self._headers_of(scope, out)
        if out.status >= 400:  # what Django's handler logs of such an answer (django.request)
            answered = HttpResponse(status=out.status)
            log_response("%s: %s", answered.reason_phrase, scope["path"], response=answered)
        return out, headers

    def _headers_of(self, scope: Scope, out: Outbound) -> list[tuple[bytes, bytes]]:
        """The core's answer's headers as Django would send them for the view:
        its Content-Type first, the core's headers (a name given twice, in
        any case, keeps its first place and its last value), then those the
        header middleware add when the response has none of that name."""
        fields = {"content-type": ("Content-Type", out.content_type)}
        for name, value in out.headers.items():
            fields[name.lower()] = (name, value)
        for name, value in self._middleware_headers(scope):
            if name.lower() not in fields:
                if name != "Content-Length":
                    fields[name.lower()] = (name, value)
                elif out.stream is None:  # CommonMiddleware's, for a whole body
                    fields["content-length"] = (name, str(len(out.body)))
        pairs = list(fields.values())
        if not any("\n" in text or "\r" in text for pair in pairs for text in pair):
            try:
                return [(name.encode("ascii"), value.encode("latin-1")) for name, value in pairs]
            except UnicodeEncodeError:
                pass
        # A value that is not Latin-1, or a line break: Django's ResponseHeaders encodes
        # the one (RFC 2047) and refuses the other (BadHeaderError), as for the view.
        return _header_list(ResponseHeaders(dict(pairs)))

    def _middleware_headers(self, scope: Scope) -> list[tuple[str, str]]:
        """What the header middleware add to a response of a request that
        passes through them (`passes_through`): their own hooks, run once on
        an empty response, in their order (the settings they read are fixed
        while no test changes them: then it is worked out again)."""
        if self._added is None or self._added[0] != _settings_changes:
            request, _ = self.create_request(scope, io.BytesIO())
            assert request is not None
            response: HttpResponseBase = HttpResponse(b"", content_type="application/json")
            for layer in reversed(self._inline.layers):
                hook = getattr(layer, "process_response", None)
                if hook:
                    response = hook(request, response)
            self._added = (_settings_changes, [(name, value) for name, value in response.items() if name != "Content-Type"])
        return self._added[1]


async def _send_outbound(out: Outbound, headers: list[tuple[bytes, bytes]], send: Send) -> None:
    """The core's answer sent as Django's handler sends the view's response."""
    await send({"type": "http.response.start", "status": out.status, "headers": headers})
    if out.stream is None:
        await send({"type": "http.response.body", "body": out.body})
        return
    del headers  # sent: a stream may last minutes, thousands at once
    # The cores' streams are async generators: closed here, whatever happens to the send.
    async with aclosing(out.stream) as parts:  # type: ignore[type-var]
        async for part in parts:
            await send({"type": "http.response.body", "body": part, "more_body": True})
    await send({"type": "http.response.body"})


def passes_through(scope: Scope) -> bool:
    """Whether a request is a door's POST that Django's header middleware
    would let through unchanged, so that it can be answered without Django's
    request and response (`answer_scope`): ~0.2 ms of a call's CPU at c=1
    (docs/performance.md, issue 45). Conservative: a setting that makes
    them act on the request (an SSL redirect, a forwarded or www host, a
    user-agent ban, a script name), a secure request (HSTS), or a host
    ALLOWED_HOSTS does not list, and Django's path answers, as before."""
    if HEADERS not in scope or scope["path"] not in (CHAT_PATH, *DOOR_PATHS) or scope.get("scheme", "http") != "http":
        return False
    if (
        settings.SECURE_SSL_REDIRECT
        or settings.SECURE_PROXY_SSL_HEADER
        or settings.USE_X_FORWARDED_HOST
        or settings.PREPEND_WWW
        or settings.DISALLOWED_USER_AGENTS
        or settings.FORCE_SCRIPT_NAME
    ):
        return False
    host = scope[HEADERS].get("host")
    if not host:
        return False
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    return _allowed_host(host, tuple(allowed))


@lru_cache(maxsize=64)
def _allowed_host(host: str, allowed: tuple[str, ...]) -> bool:
    """HttpRequest.get_host's check, remembered: a client sends the same Host
    on every call (split_domain_port and its lazy regex were ~1 % of a call)."""
    domain, _ = split_domain_port(host)
    return bool(domain) and validate_host(domain, allowed)


_settings_changes = 0  # counts Django's setting_changed signals (tests change settings)


@receiver(setting_changed)
def _settings_changed(**kwargs: Any) -> None:
    global _settings_changes
    _settings_changes += 1


def _header_list(response: HttpResponseBase | ResponseHeaders) -> list[tuple[bytes, bytes]]:
    """The response's headers and cookies as ASGI sends them, as Django's send_response makes them."""
    headers = [(name.encode("ascii"), value.encode("latin1")) for name, value in response.items()]
    if isinstance(response, HttpResponseBase):
        headers += [(b"Set-Cookie", c.output(header="").encode("ascii").strip()) for c in response.cookies.values()]
    return headers


async def _read_body(receive: Receive) -> bytes:
    """The body, as the server hands it over (Intake has bounded its size):
    one message's bytes as they are. Django's `read_body` copies them into a
    spooled file, and reading that copies them again: in a burst, thousands
    of bodies, each copied twice, leave the allocator holes of their size
    (docs/performance.md)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise RequestAborted()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


@lru_cache(maxsize=256)
def _resolved(resolver: URLResolver, path: str) -> ResolverMatch:
    """The match of `path` (a new ROOT_URLCONF makes a new resolver: a new key).
    Bounded: unknown /v1 paths are many, and each resolves to its own match."""
    return resolver.resolve(path)


async def _cancel_on_disconnect(receive: Receive, task: asyncio.Task[Any] | None, scope: Scope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    # Said in the scope, not with an asyncio.Event: an Event's deque is 0.6 KB
    # of each of the thousands of requests a worker may hold (docs/performance.md).
    scope[GONE] = True
    if task is not None:
        task.cancel()


class Doors:
    """/v1/ to the API's handler, the rest to the site's."""

    def __init__(self, api: ASGIApp, site: ASGIApp) -> None:
        self.api, self.site = api, site

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"].removeprefix(scope.get("root_path", "")) if scope["type"] == "http" else ""
        if path.startswith(API_PREFIX) and not path.startswith(SITE_UNDER_API):
            await self.api(scope, receive, send)
        else:
            await self.site(scope, receive, send)
