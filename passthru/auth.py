"""Who is calling: `Authorization: Bearer <key>` against MODEL_API_KEYS.

A key is never stored or logged. The ledger and traces see only the key's
name (`secret:name`) or, for a nameless key, `key-` plus a short hash prefix.

`secret:*` is an operator's key for many callers: a request made with it may
name its caller with `X-Marina-Agent: <name>`, and that name is what the
ledger and traces record (without the header: the key's hash name). So may
any caller in open mode. Other keys' callers cannot rename themselves: the
header is ignored for them."""
from __future__ import annotations

import hashlib
import hmac
import logging
import re
from dataclasses import dataclass
from functools import lru_cache

from django.conf import settings

from passthru.errors import ApiError

log = logging.getLogger(__name__)

OPEN_MODE_NAME = "open"
WILDCARD = "*"
# A caller's name as X-Marina-Agent gives it: no ':' (the keys' separator), no spaces.
_AGENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}$")


@dataclass(frozen=True)
class Caller:
    key_name: str
    keyed: bool = True  # False in open mode: rate limits then go by IP


@dataclass(frozen=True)
class _Key:
    digest: bytes  # sha256 of the secret: compare digests so lengths never leak
    name: str
    names_callers: bool = False  # `secret:*`


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
        wildcard = name == WILDCARD
        keys.append(_Key(digest, f"key-{digest.hex()[:8]}" if wildcard or not name else name, wildcard))
    return tuple(keys)


def _agent(name: str) -> str:
    name = name.strip()
    if not _AGENT_NAME.match(name):
        raise ApiError(
            400,
            "X-Marina-Agent must be a caller name of 1 to 64 letters, digits and . _ @ + - (no ':').",
            code="invalid_agent_name",
        )
    return name


def authenticate(authorization: str | None, agent: str | None = None) -> Caller:
    """The caller behind an Authorization header (and, for a `secret:*` key
    or open mode, the X-Marina-Agent header), or ApiError(401)."""
    keys = _parse_keys(settings.MODEL_API_KEYS)
    if not keys:
        if settings.MARINA_OPEN_API:
            return Caller(_agent(agent) if agent else OPEN_MODE_NAME, keyed=False)
        raise ApiError(
            401,
            "The model API is closed: set MODEL_API_KEYS (comma list of keys) "
            "or MARINA_OPEN_API=true for local development.",
        )
    if not authorization or not authorization.startswith("Bearer "):
        raise ApiError(401, "Missing or invalid Authorization header: send 'Authorization: Bearer <key>'.")
    offered = hashlib.sha256(authorization[7:].strip().encode()).digest()
    match: _Key | None = None
    for key in keys:  # no early exit: every entry is compared (timing-safe)
        if hmac.compare_digest(offered, key.digest) and match is None:
            match = key
    if match is None:
        raise ApiError(401, "Invalid API key.")
    if match.names_callers and agent:
        return Caller(_agent(agent))
    return Caller(match.name)


def warn_if_open() -> None:
    if not _parse_keys(settings.MODEL_API_KEYS) and settings.MARINA_OPEN_API:
        log.warning("MARINA_OPEN_API=true and no MODEL_API_KEYS: /v1 accepts any caller")
