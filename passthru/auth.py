"""Who is calling: `Authorization: Bearer <key>` against MODEL_API_KEYS and the
keys made with `manage.py create_key` (stored as SHA-256 digests only).

A key is never stored or logged. The ledger and traces see only the key's
name (`secret:name`) or, for a nameless key, `key-` plus a short hash prefix.

`secret:ops/*` (or `secret:*`) in MODEL_API_KEYS is an operator's key for many
callers: a request made with it may name its caller with `X-Marina-Agent:
<name>`, and the caller is then `ops/<name>` (`key-<hash>/<name>` for `*`):
what the ledger, traces, rate limits and formation state go by. A key name
never holds a `/`, so no name an operator key gives can be another key's; a
key's reads (/api) cover its own name and its callers' `<name>/…`. So may any
caller name itself in open mode (no keys at all). Other keys' callers cannot
rename themselves: the header is ignored for them."""
from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import hmac
import logging
import re
import secrets
import time
from dataclasses import dataclass
from functools import lru_cache

from django.conf import settings

from kernel import dbwriter
from ledger.spend import services
from passthru.errors import ApiError

log = logging.getLogger(__name__)

OPEN_MODE_NAME = "open"
SECRET_PREFIX = "sk-marina-"
# Key names: what the ledger shows. `demo-` is the demo data's (ledger/demo.py).
_NAME = re.compile(r"^[A-Za-z0-9._@-]{1,64}$")
RESERVED = (OPEN_MODE_NAME,)
RESERVED_PREFIXES = ("demo-", "key-")

# Stored keys are read again at most this often per process (a revoked key
# stops working within this time), and at once, at most once a second, when an
# unknown key is offered (a new key works on its first call).
KEY_REFRESH_SECONDS = 5.0
UNKNOWN_KEY_REFRESH_SECONDS = 1.0


WILDCARD = "*"


@dataclass(frozen=True)
class Caller:
    key_name: str  # who is charged and traced: the key's name, or `<operator>/<agent>`
    keyed: bool = True  # False in open mode: rate limits then go by IP
    principal: str = ""  # the key itself (an operator key's name, without its callers): what /api reads go by
    reads_all: bool = False  # `create_key --read-all`: /api reads every key's traces and spend

    @property
    def owner(self) -> str:
        return self.principal or self.key_name


@dataclass(frozen=True)
class _Key:
    digest: bytes  # sha256 of the secret: compare digests so lengths never leak
    name: str
    names_callers: bool = False  # `secret:*` or `secret:<name>/*`

# What separates an operator key's name from its caller's: never in a key name.
AGENT_SEPARATOR = "/"
OPERATOR_SUFFIX = AGENT_SEPARATOR + WILDCARD
NAME_LIMIT = 64  # the ledger's key_name columns


@lru_cache(maxsize=4)
def _parse_keys(raw: str) -> tuple[_Key, ...]:
    keys = []
    for entry in filter(None, (part.strip() for part in raw.split(","))):
        secret, _, name = entry.partition(":")  # split on the first colon
        secret = secret.strip()
        if not secret:
            continue
        digest = hashlib.sha256(secret.encode()).digest()
        name = name.strip()
        wildcard = name == WILDCARD or name.endswith(OPERATOR_SUFFIX)
        if name.endswith(OPERATOR_SUFFIX):
            name = name[: -len(OPERATOR_SUFFIX)]
        elif wildcard:
            name = ""
        keys.append(_Key(digest, name or f"key-{digest.hex()[:8]}", wildcard))
    return tuple(keys)


@dataclass(frozen=True)
class _Stored:
    keys: dict[bytes, services.Active]
    read_at: float


_stored: _Stored | None = None
_reading: concurrent.futures.Future[dict[bytes, services.Active]] | None = None


async def _stored_keys(offered: bytes | None) -> dict[bytes, services.Active]:
    """The stored keys as this process last read them, read again when stale."""
    global _stored, _reading
    now = time.monotonic()
    cache = _stored
    stale = cache is None or now - cache.read_at >= KEY_REFRESH_SECONDS
    unknown = (
        cache is not None and offered is not None and offered not in cache.keys
        and now - cache.read_at >= UNKNOWN_KEY_REFRESH_SECONDS
    )  # fmt: skip
    if not (stale or unknown):
        return cache.keys  # type: ignore[union-attr]
    if _reading is None:  # one read at a time per process; others wait for it
        _reading = dbwriter.submit(services.active_keys)
    reading = _reading
    try:
        keys = await asyncio.wrap_future(reading)
    finally:
        if _reading is reading:
            _reading = None
    _stored = _Stored(keys, time.monotonic())
    return keys


def forget() -> None:
    """Drop this process's copy of the stored keys (tests, and after create/revoke)."""
    global _stored
    _stored = None


def _agent(name: str, operator: str | None) -> str:
    """An X-Marina-Agent name under its operator key's name (`ops/alice`; open
    mode: the name alone), or the 400 saying what a name may be."""
    name = name.strip()
    room = NAME_LIMIT - (len(operator) + len(AGENT_SEPARATOR) if operator else 0)
    if not _NAME.match(name) or len(name) > room:
        raise ApiError(
            400,
            f"X-Marina-Agent must be a caller name of 1 to {room} letters, digits or . _ @ -.",
            code="invalid_agent_name",
        )
    return f"{operator}{AGENT_SEPARATOR}{name}" if operator else name


async def authenticate(authorization: str | None, agent: str | None = None) -> Caller:
    """The caller behind an Authorization header (and, for a `secret:*` key or
    in open mode, the X-Marina-Agent header), or ApiError(401)."""
    env_keys = _parse_keys(settings.MODEL_API_KEYS)
    offered = None
    scheme, _, credentials = (authorization or "").strip().partition(" ")
    # The scheme is case-insensitive (RFC 9110 section 11.1): `bearer` is `Bearer`.
    if scheme.lower() == "bearer" and credentials.strip():
        offered = hashlib.sha256(credentials.strip().encode()).digest()
    if offered is not None and env_keys:
        match: _Key | None = None
        for key in env_keys:  # no early exit: every entry is compared (timing-safe)
            if hmac.compare_digest(offered, key.digest) and match is None:
                match = key
        if match is not None:
            named = _agent(agent, match.name) if match.names_callers and agent else match.name
            return Caller(named, principal=match.name)
    stored = await _stored_keys(offered)
    if not env_keys and not stored:
        if settings.MARINA_OPEN_API:
            return Caller(_agent(agent, None) if agent else OPEN_MODE_NAME, keyed=False)
        raise ApiError(
            401,
            "The model API is closed: make a key with `manage.py create_key NAME`, set MODEL_API_KEYS "
            "(comma list of keys), or MARINA_OPEN_API=true for local development.",
        )
    if offered is None:
        raise ApiError(401, "Missing or invalid Authorization header: send 'Authorization: Bearer <key>'.")
    found = stored.get(offered)
    if found is None:
        raise ApiError(401, "Invalid API key.")
    return Caller(found.name, principal=found.name, reads_all=found.reads_all)


def warn_if_open() -> None:
    if not _parse_keys(settings.MODEL_API_KEYS) and settings.MARINA_OPEN_API:
        log.warning("MARINA_OPEN_API=true and no MODEL_API_KEYS: /v1 accepts any caller unless keys were made with create_key")


# --- Keys in the database (manage.py create_key / revoke_key) ---------------------


class KeyRefused(ValueError):
    """A key name that cannot be used or found; the message says why."""


def create_key(name: str, *, reads_all: bool = False) -> str:
    """Make a key named `name` and return its secret: the only time it is seen.
    Only its SHA-256 is stored. The name is what the ledger and reports show.
    `reads_all`: the key reads every key's traces and spend at /api (else its own)."""
    if not _NAME.match(name):
        raise KeyRefused(f"key names are 1 to 64 letters, digits or . _ @ -, not {name!r}")
    if name in RESERVED or name.startswith(RESERVED_PREFIXES):
        raise KeyRefused(f"{name!r} is reserved (open, and names starting demo- or key-)")
    if any(key.name == name for key in _parse_keys(settings.MODEL_API_KEYS)):
        raise KeyRefused(f"MODEL_API_KEYS already has a key named {name!r}")
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    try:
        services.store_key(name, hashlib.sha256(secret.encode()).digest(), secret[: len(SECRET_PREFIX) + 4], reads_all)
    except services.KeyNameTaken as exc:
        raise KeyRefused(str(exc)) from None
    forget()
    return secret


def revoke_key(name: str) -> None:
    """Revoke a key made with create_key: refused within KEY_REFRESH_SECONDS on every server."""
    if not services.revoke(name):
        raise KeyRefused(f"no active key named {name!r} (keys in MODEL_API_KEYS are removed from the environment)")
    forget()
