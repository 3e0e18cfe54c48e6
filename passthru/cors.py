"""CORS for /v1, for browser clients: off until MARINA_CORS_ORIGINS lists the
origins allowed (or `*`).

Answers carry Access-Control-Allow-Origin and Access-Control-Expose-Headers
naming Marina's response headers (a browser hides every other header from
the page); preflight OPTIONS requests are answered without a key. Keys are
bearer tokens, never cookies, so no credentials are allowed."""
from __future__ import annotations

from collections.abc import Mapping

from django.conf import settings

# Every response header of Marina's a client may want to read.
EXPOSED = (
    "x-request-id",
    "x-marina-upstream-model",
    "x-marina-cost-usd",
    "x-marina-cost-unpriced-calls",
    "x-marina-overhead-ms",
    "x-marina-cache-read-tokens",
    "x-marina-cache-write-tokens",
    "x-marina-verify",
    "x-marina-lessons",
    "x-marina-obligations",
    "x-marina-obligations-cost-usd",
    "x-marina-argcheck",
    "x-marina-argcheck-cost-usd",
    "retry-after",
    "retry-after-ms",
    "x-should-retry",  # the cap's refusal: the SDKs' "do not retry"
)
ALLOWED_REQUEST_HEADERS = (
    "authorization, content-type, x-request-id, x-marina-agent, x-marina-session, x-marina-obligations, "
    "x-marina-argcheck, x-marina-lessons, x-marina-eval, x-stainless-os, x-stainless-lang, x-stainless-arch, "
    "x-stainless-runtime, x-stainless-runtime-version, x-stainless-package-version, x-stainless-retry-count, "
    "x-stainless-timeout"
)
MAX_AGE_SECONDS = 600


def _allowed(origin: str | None) -> str | None:
    """The Access-Control-Allow-Origin value for this request's Origin, or None."""
    origins = settings.MARINA_CORS_ORIGINS
    if not origin or not origins:
        return None
    if "*" in origins:
        return "*"
    return origin if origin in origins else None


def headers(request_headers: Mapping[str, str]) -> dict[str, str]:
    """CORS headers for an answer to a request with these (lower-cased) headers."""
    allow = _allowed(request_headers.get("origin"))
    if allow is None:
        return {}
    out = {"access-control-allow-origin": allow, "access-control-expose-headers": ", ".join(EXPOSED)}
    if allow != "*":
        out["vary"] = "Origin"
    return out


def preflight(request_headers: Mapping[str, str]) -> dict[str, str]:
    """Headers of the 204 answering a preflight OPTIONS (none if the origin is not allowed)."""
    out = headers(request_headers)
    if out:
        out["access-control-allow-methods"] = "GET, POST, OPTIONS"
        out["access-control-allow-headers"] = request_headers.get("access-control-request-headers") or ALLOWED_REQUEST_HEADERS
        out["access-control-max-age"] = str(MAX_AGE_SECONDS)
    return out
