"""An ASGI fast path for `POST /v1/chat/completions`, in front of Django.

Why: Django's ASGI handler and middleware cost 5–7 ms of CPU per call on
this machine, four times everything else on the route (docs/performance.md):
WhiteNoise is a sync-only middleware, so every request hops to a worker
thread and back, and the request_started/finished signals and
`response.close()` each start another.
The chat route is the one every agent turn takes, so it is served straight from
the framework-neutral core, `passthru.chat.chat_completions(Inbound) -> Outbound`,
which the Ninja operation also calls. Everything else (and this route, when the
fast path is off or the request is unusual) goes to Django unchanged.

What it keeps identical to the Django route (tests/marina/test_fastpath.py sends the
same requests both ways and compares):
- status, body, headers (the core's, plus exactly those Django's middleware
  adds to this route: Content-Length, X-Frame-Options, X-Content-Type-Options,
  Referrer-Policy, Cross-Origin-Opener-Policy), header encoding;
- the request headers the core sees (lower-cased, names with `_` dropped,
  repeats joined with `,`, as django.core.handlers.asgi.ASGIRequest does);
- a Host outside ALLOWED_HOSTS is left to Django (its 400);
- a client that disconnects cancels the call, as Django's handler does, so a
  stream is traced `cancelled`.

It turns itself off (with a warning) when the settings would make Django do
something it does not copy: a different MIDDLEWARE list, SSL redirects, HSTS,
X-Forwarded-Host or a script prefix. MARINA_FASTPATH=off turns it off outright.
"""
from __future__ import annotations

import asyncio
import logging
from contextlib import aclosing

from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.http.response import ResponseHeaders

from marina import intake
from marina.intake import CHAT_PATH, ASGIApp, Receive, Scope, Send, request_headers
from passthru.chat import chat_completions, refuse
from passthru.context import Inbound
from passthru.errors import REQUEST_LIMIT, ApiError, internal_error
from passthru.responses import Outbound, error_out

log = logging.getLogger(__name__)

# The middleware whose effect on the chat route _middleware_headers() copies.
# Any other list sends every request through Django.
KNOWN_MIDDLEWARE = (
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
)


def incompatible_settings() -> str:
    """Why the fast path cannot stand in for Django with these settings ('' if it can)."""
    if tuple(settings.MIDDLEWARE) != KNOWN_MIDDLEWARE:
        return "MIDDLEWARE differs from the list the fast path copies"
    if settings.SECURE_SSL_REDIRECT:
        return "SECURE_SSL_REDIRECT is on"
    if settings.SECURE_HSTS_SECONDS:
        return "SECURE_HSTS_SECONDS is set"
    if settings.USE_X_FORWARDED_HOST:
        return "USE_X_FORWARDED_HOST is on"
    if settings.FORCE_SCRIPT_NAME:
        return "FORCE_SCRIPT_NAME is set"
    if settings.DISALLOWED_USER_AGENTS:
        return "DISALLOWED_USER_AGENTS is set"
    return ""


def wrap(django_app: ASGIApp) -> ASGIApp:
    """Django's ASGI app with the fast path in front, when settings allow it."""
    if not settings.MARINA_FASTPATH:
        return django_app
    reason = incompatible_settings()
    if reason:
        log.warning("ASGI fast path off: %s; every request goes through Django", reason)
        return django_app
    return FastPath(django_app)


def _middleware_headers(streaming: bool, body: bytes) -> list[tuple[str, str]]:
    """Headers Django's middleware adds to this route's responses, in the order
    it adds them (response phase: XFrameOptions, then Common, then Security)."""
    added = [("X-Frame-Options", settings.X_FRAME_OPTIONS.upper())]
    if not streaming:
        added.append(("Content-Length", str(len(body))))
    if settings.SECURE_CONTENT_TYPE_NOSNIFF:
        added.append(("X-Content-Type-Options", "nosniff"))
    policy = settings.SECURE_REFERRER_POLICY
    if policy:
        value = ",".join([v.strip() for v in policy.split(",")] if isinstance(policy, str) else policy)
        added.append(("Referrer-Policy", value))
    if settings.SECURE_CROSS_ORIGIN_OPENER_POLICY:
        added.append(("Cross-Origin-Opener-Policy", settings.SECURE_CROSS_ORIGIN_OPENER_POLICY))
    return added


def _encode_headers(pairs: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    # The usual case is plain ASCII; anything else gets Django's own treatment
    # (MIME-encoded non-Latin-1 values, BadHeaderError on newlines).
    if all(v.isascii() and "\n" not in v and "\r" not in v for _, v in pairs):
        return [(k.encode("ascii"), v.encode("ascii")) for k, v in pairs]
    converted = ResponseHeaders({})
    out = []
    for name, value in pairs:
        converted[name] = value
        out.append((name.encode("ascii"), converted[name].encode("latin-1")))
    return out


def _host_allowed(host: str | None) -> bool:
    if not host:
        return False  # Django falls back to SERVER_NAME; let it
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    domain, _port = split_domain_port(host)
    return bool(domain) and validate_host(domain, allowed)


class _Call:
    """One request's state shared with its disconnect watcher."""

    __slots__ = ("task", "started", "finished", "aborted")

    def __init__(self) -> None:
        self.task = asyncio.current_task()
        self.started = False  # the status line has gone out
        self.finished = False
        self.aborted = False


async def _watch_disconnect(receive: Receive, call: _Call) -> None:
    # Django's handler cancels the view when the client disconnects; so do we.
    while (await receive())["type"] != "http.disconnect":
        pass
    if not call.finished and call.task is not None:
        call.aborted = True
        call.task.cancel()


class FastPath:
    """ASGI app: the chat route served from the core, the rest by Django."""

    def __init__(self, django_app: ASGIApp) -> None:
        self.django_app = django_app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == CHAT_PATH and scope["method"] == "POST" and not scope.get("root_path"):
            headers = request_headers(scope)
            if _host_allowed(headers.get("host")):
                client = scope.get("client")
                await self.chat(headers, receive, send, peer=client[0] if client else "")
                return
        await self.django_app(scope, receive, send)

    async def chat(self, headers: dict[str, str], receive: Receive, send: Send, *, peer: str = "") -> None:
        try:
            # The key and a declared size before the body; the body read to the
            # limit and no further (marina/intake.py).
            caller = await intake.admit(CHAT_PATH, headers)
            body = await intake.read_body(receive, REQUEST_LIMIT)
        except ApiError as exc:
            # Refused (unread or partly read) and traced, as the Ninja operation does (passthru/api.py _serve).
            unread = Inbound(method="POST", path=CHAT_PATH, headers=headers, body=b"")
            await _respond(send, await refuse(unread, exc), _Call())
            return
        if body is None:
            return
        call = _Call()
        watcher = asyncio.create_task(_watch_disconnect(receive, call))
        try:
            try:
                inbound = Inbound(method="POST", path=CHAT_PATH, headers=headers, body=body, peer=peer, caller=caller)
                out = await chat_completions(inbound)
            except ApiError as exc:  # the Ninja route maps these in marina/api.py
                out = error_out(exc)
            await _respond(send, out, call)
        except asyncio.CancelledError:
            if not call.aborted:
                raise
            # The client went away: nothing to answer, as with Django's handler.
            if call.task is not None:
                call.task.uncancel()
        except Exception:
            # What marina/api.py's unexpected_error answers on the Django route.
            log.exception("unexpected error on POST %s", CHAT_PATH)
            if not call.started:
                await _respond(send, error_out(internal_error()), call)
        finally:
            call.finished = True
            watcher.cancel()


async def _respond(send: Send, out: Outbound, call: _Call) -> None:
    streaming = out.stream is not None
    pairs = [("Content-Type", out.content_type), *out.headers.items(), *_middleware_headers(streaming, out.body)]
    encoded = _encode_headers(pairs)
    call.started = True
    await send({"type": "http.response.start", "status": out.status, "headers": encoded})
    if out.stream is None:
        await send({"type": "http.response.body", "body": out.body})
        return
    async with aclosing(out.stream) as events:  # type: ignore[type-var]
        async for event in events:
            if event:
                await send({"type": "http.response.body", "body": event, "more_body": True})
    await send({"type": "http.response.body", "body": b""})
