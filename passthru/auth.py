"""Who is calling: `Authorization: Bearer <key>` against MODEL_API_KEYS.

A key is never stored or logged. The ledger and traces see only the key's
name (`secret:name`) or, for a nameless key, `key-` plus a short hash prefix."""
from __future__ import annotations

import hashlib
import hmac
import logging
from dataclasses import dataclass
from functools import lru_cache

from django.conf import settings

from passthru.errors import ApiError

log = logging.getLogger(__name__)

OPEN_MODE_NAME = "open"


@dataclass(frozen=True)
class Caller:
    key_name: str


@dataclass(frozen=True)
class _Key:
    digest: bytes  # sha256 of the secret: compare digests so lengths never leak
    name: str


@lru_cache(maxsize=4)
def _parse_keys(raw: str) -> tuple[_Key, ...]:
    keys = []
    for entry in filter(None, (part.strip() for part in raw.split(","))):
        secret, _, name = entry.partition(":")  # split on the first colon
        secret = secret.strip()
        if not secret:
            continue
        digest = hashlib.sha256(secret.encode()).digest()
        keys.append(_Key(digest, name.strip() or f"key-{digest.hex()[:8]}"))
    return tuple(keys)


def authenticate(authorization: str | None) -> Caller:
    """The caller behind an Authorization header, or ApiError(401)."""
    keys = _parse_keys(settings.MODEL_API_KEYS)
    if not keys:
        if settings.MARINA_OPEN_API:
            return Caller(OPEN_MODE_NAME)
        raise ApiError(
            401,
            "The model API is closed: set MODEL_API_KEYS (comma list of keys) "
            "or MARINA_OPEN_API=true for local development.",
        )
    scheme, _, credentials = (authorization or "").strip().partition(" ")
    # The scheme is case-insensitive (RFC 9110 section 11.1): `bearer` is `Bearer`.
    if scheme.lower() != "bearer" or not credentials.strip():
        raise ApiError(401, "Missing or invalid Authorization header: send 'Authorization: Bearer <key>'.")
    offered = hashlib.sha256(credentials.strip().encode()).digest()
    match: _Key | None = None
    for key in keys:  # no early exit: every entry is compared (timing-safe)
        if hmac.compare_digest(offered, key.digest) and match is None:
            match = key
    if match is None:
        raise ApiError(401, "Invalid API key.")
    return Caller(match.name)


def warn_if_open() -> None:
    if not _parse_keys(settings.MODEL_API_KEYS) and settings.MARINA_OPEN_API:
        log.warning("MARINA_OPEN_API=true and no MODEL_API_KEYS: /v1 accepts any caller")
