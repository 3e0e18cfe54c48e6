"""Errors the /v1 surface answers with, all in OpenAI's error envelope.

Operations never catch these: marina/api.py maps each class to its status and
envelope once (STYLE practice 3). The two errors every edge may raise on its
own (passthru/intake.py, the Ninja route, the core) are built here only, so
their wording cannot drift apart: `internal_error` (the 500) and
`check_request_size` (the 413)."""
from __future__ import annotations

import json
from typing import Any

from django.conf import settings

from kernel.redact import redact

_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


class ApiError(Exception):
    """An error Marina itself decides, with the OpenAI fields to report."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        error_type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code or _default_code(status)
        self.param = param
        self.error_type = error_type or _TYPE_BY_STATUS.get(status, "server_error")
        self.headers = headers or {}  # sent with the envelope (e.g. Retry-After)

    def envelope(self) -> dict[str, Any]:
        return error_envelope(self.message, self.error_type, self.code, self.param)

    @property
    def trace_kind(self) -> str:
        """The short error kind a trace or span records: the code."""
        return self.code


class UpstreamError(ApiError):
    """The provider could not be reached or answered with something unusable.

    `kind` is the short error kind that traces record: connect, reset, timeout,
    bad_json, cancelled."""

    def __init__(self, provider: str, kind: str, message: str, *, status: int = 502, code: str = "upstream_error") -> None:
        super().__init__(status, message, code=code)
        self.provider = provider
        self.kind = kind

    @property
    def trace_kind(self) -> str:
        return self.kind


def bad_upstream_response(provider: str, status: int, content_type: str) -> UpstreamError:
    """The 502 for a reply that cannot be passed on as OpenAI's API: a body
    that is not JSON (a proxy's HTML error page; a 200 text/html to a stream).
    Relayed, it reached clients as JSON or as a successful answer."""
    media = content_type.split(";", 1)[0].strip()[:60]
    what = media if media.isprintable() and media else "no content type"
    return UpstreamError(
        provider,
        "bad_json",
        f"Provider '{provider}' sent a reply that is not JSON (HTTP {status}, {what}).",
        code="bad_upstream_response",
    )


def internal_error(request_id: str | None = None) -> ApiError:
    """The 500 for a bug, not the client's fault. Never says what failed (the
    log does): an exception's text may hold a secret or a body."""
    where = f" ({request_id})" if request_id else ""
    return ApiError(500, f"Marina failed on this request{where}.", code="internal_error", error_type="server_error")


# The two body limits: chat requests, and the larger benchmark uploads.
REQUEST_LIMIT = "MARINA_MAX_REQUEST_BYTES"
UPLOAD_LIMIT = "MARINA_MAX_UPLOAD_BYTES"


def check_request_size(size: int | None, limit: str = REQUEST_LIMIT) -> None:
    """Raise the 413 if a body of `size` bytes (declared or read; None: not
    known yet) is over the `limit` setting."""
    if size is not None and size > getattr(settings, limit):
        raise request_too_large(limit)


def request_too_large(limit: str = REQUEST_LIMIT) -> ApiError:
    """The 413, one wording whether the size was declared or found by reading.
    It never states the size: reading stops at the limit (passthru/intake.py),
    so a chunked body's size is never known."""
    return ApiError(
        413, f"Request body is too large; the limit is {limit}={getattr(settings, limit)}.", code="request_too_large"
    )


def declared_size(headers: dict[str, str]) -> int | None:
    """The Content-Length a client declared, if it is a number."""
    declared = headers.get("content-length", "")
    return int(declared) if declared.isdigit() else None


def error_envelope(message: str, error_type: str, code: str | None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def _default_code(status: int) -> str:
    if status in (401, 403):
        return "invalid_api_key"
    if status == 404:
        return "not_found"
    if status == 429:
        return "rate_limit_exceeded"
    if status in (502, 503, 504):
        return "upstream_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def relayed_error(body: bytes) -> bytes:
    """An upstream error body (JSON) to relay: as it came, unless it echoes a
    credential (`Bearer …`, a provider key), which is redacted: providers
    quote the request's Authorization header back in some errors."""
    try:
        payload = json.loads(body)
    except ValueError:
        return body
    cleaned = redact(payload)
    return body if cleaned == payload else json.dumps(cleaned, ensure_ascii=False).encode()


def retry_after(value: str) -> dict[str, str]:
    """The upstream's Retry-After to pass on with its 429/503 (delay-seconds
    or an HTTP date; anything else is dropped)."""
    value = value.strip()
    if value and len(value) <= 64 and value.isprintable() and (value.isdigit() or "," in value):
        return {"retry-after": value}
    return {}
