"""What a request goes through before its body is read: the key check on the
routes that need a key, and the body limit, stopping at the limit.

Why: a `Transfer-Encoding: chunked` body has no Content-Length to refuse on,
and Django's ASGI handler used to read it whole before
anything looked at it: 1.2 GB without a key took a worker to 2 GB and answered
401 after 11 s. Now an unauthenticated call is refused from its headers, and a
body is counted as it arrives and refused (413) as soon as it passes its limit
(MARINA_MAX_REQUEST_BYTES; MARINA_MAX_UPLOAD_BYTES for benchmark uploads). The
rest of a refused body is never stored: the server (uvicorn) discards it as it
arrives, keeping the connection usable, so a client that sends its whole body
before reading still gets the answer.

In front of Django's handlers (marina/asgi.py), `Intake` hands its decision to
the views in the ASGI scope (`admitted`), so Django still answers, with its
middleware and the trace, as it would have: a refused request reaches the view
with an empty body. On the other paths (admin forms and the like) a body over the limit is
answered here, as Django would only spool it to disk."""
from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from django.conf import settings
from django.http import HttpRequest

from passthru import auth
from passthru.errors import (
    REQUEST_LIMIT,
    UPLOAD_LIMIT,
    ApiError,
    check_request_size,
    declared_size,
    internal_error,
    request_too_large,
)

log = logging.getLogger(__name__)

# ASGI's shapes as django-stubs types Django's handler (a dict scope, mappings
# received and sent), so that handler is an ASGIApp too.
Scope = dict[str, Any]
Message = Mapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CHAT_PATH = "/v1/chat/completions"
UPLOAD_PATH = "/v1/benchmarks/runs"
MESSAGES_PATH = "/v1/messages"  # Anthropic's Messages API: the key may come as x-api-key
# The other doors (passthru/doors/).
DOOR_PATHS = ("/v1/responses", "/v1/embeddings", MESSAGES_PATH)
KEYED_PATHS = (CHAT_PATH, UPLOAD_PATH, *DOOR_PATHS)  # POST routes that take a body and a key

# Where Intake leaves its decision for the view (read by `admitted`).
REFUSAL = "marina.refusal"
CALLER = "marina.caller"
HEADERS = "marina.headers"  # the request headers as request_headers() gives them
# The body, handed to /v1's views by the API's handler (marina/mounts.py) rather than kept by the request.
BODY = "marina.body"
_END_OF_BODY: Message = {"type": "http.request", "body": b"", "more_body": False}


def limit_for(path: str) -> str:
    """The setting that limits a body sent to `path`."""
    return UPLOAD_LIMIT if path == UPLOAD_PATH else REQUEST_LIMIT


async def admit(path: str, headers: dict[str, str]) -> auth.Caller:
    """Before the body: the 413 on a declared size, then the caller behind the
    key (ApiError 401, or 400 for a bad X-Marina-Agent)."""
    check_request_size(declared_size(headers), limit_for(path))
    try:
        return await auth.authenticate(key_header(path, headers), headers.get("x-marina-agent"))
    except ApiError:
        raise
    except Exception:  # the stored keys could not be read: the core's 500, not a dropped request
        log.exception("could not check the key on POST %s", path)
        raise internal_error() from None


def key_header(path: str, headers: Mapping[str, str]) -> str | None:
    """The Authorization header to check; on /v1/messages, Anthropic's clients
    send the key as `x-api-key` instead, taken when there is no Authorization."""
    authorization = headers.get("authorization")
    if authorization is None and path == MESSAGES_PATH and headers.get("x-api-key"):
        return f"Bearer {headers['x-api-key']}"
    return authorization


def request_headers(scope: Scope) -> dict[str, str]:
    """The request headers as the Ninja operation hands them to the core."""
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", ()):
        name = raw_name.decode("latin-1").lower()
        if "_" in name:  # Django drops these (hyphen/underscore spoofing)
            continue
        value = raw_value.decode("latin-1")
        headers[name] = f"{headers[name]},{value}" if name in headers else value
    return headers


def headers_of(request: HttpRequest) -> dict[str, str]:
    """The request headers, lower-cased: those Intake read if it did (the
    same as Django's, without building them twice), else Django's."""
    scope = getattr(request, "scope", None) or {}
    headers = scope.get(HEADERS)
    if headers is None:
        headers = {k.lower(): v for k, v in request.headers.items()}
    return dict(headers)


def admitted(request: HttpRequest) -> auth.Caller | None:
    """For a view behind Intake: the caller it admitted (None: not checked,
    e.g. under WSGI), or the refusal it decided on, raised."""
    return admitted_in(getattr(request, "scope", None) or {})


def admitted_in(scope: Scope) -> auth.Caller | None:
    """`admitted`, read from the request's ASGI scope."""
    refusal = scope.get(REFUSAL)
    if refusal is not None:
        raise refusal
    return scope.get(CALLER)


class _Counted:
    """The client's `receive`, as Django's handler reads it: counted, and cut
    short (an empty last message) when the body passes its limit or the
    request was refused before reading; after that only the disconnect is
    passed on."""

    def __init__(self, receive: Receive, scope: Scope, limit: str) -> None:
        self.receive, self.scope, self.limit = receive, scope, limit
        self.cap = getattr(settings, limit)
        self.size = 0
        self.refused = REFUSAL in scope  # refused from its headers: the view gets no body
        self.ended = False  # the view has had all the body it gets
        self.over = False

    async def __call__(self) -> Message:
        if self.ended:
            return await self._after_body()
        if self.refused:
            self.ended = True
            return _END_OF_BODY
        message = await self.receive()
        if message["type"] != "http.request":
            return message
        self.size += len(message.get("body", b""))
        if self.size > self.cap:
            self.over = self.refused = self.ended = True
            self.scope[REFUSAL] = request_too_large(self.limit)
            return _END_OF_BODY
        self.ended = not message.get("more_body", False)
        return message

    async def _after_body(self) -> Message:
        # Django listens for the disconnect while the view runs; what is left
        # of a refused body is dropped meanwhile, never handed on.
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect" or not self.refused:
                return message


class Intake:
    """ASGI app in front of Django: refuses before reading, reads to the limit."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope = dict(scope)
        path = scope["path"]
        keyed = scope["method"] == "POST" and path in KEYED_PATHS and not scope.get("root_path")
        if keyed:
            scope[HEADERS] = headers = request_headers(scope)
            try:
                scope[CALLER] = await admit(path, headers)
            except ApiError as exc:
                scope[REFUSAL] = exc
        counted = _Counted(receive, scope, limit_for(path))
        if keyed:
            await self.app(scope, counted, send)
            return
        # Elsewhere the view would not look for a refusal: an over-limit body
        # ends the request for Django (as a client gone away would), and the
        # 413 is answered here.
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        async def receive_or_stop() -> Message:
            message = await counted()
            return {"type": "http.disconnect"} if counted.over else message

        await self.app(scope, receive_or_stop, watched)
        if counted.over and not started:
            await _send_error(send, request_too_large(counted.limit))


async def _send_error(send: Send, error: ApiError) -> None:
    body = json.dumps(error.envelope()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
