"""Formation state sealed at rest (docs/security.md, "Formation state is sealed").

The obligations ledger keeps what the user asked for in their words ("refund
order 9981 to card 4111-…") and argcheck the signatures of nudged calls (a
hash of the call's argument values). Both are needed in later turns, by
whichever worker serves them, so they live in the database; there they are
stored sealed, bodies on or off: the row's `state` is `{"sealed": "v1:<base64
of nonce ‖ AES-256-GCM ciphertext>"}` and nothing else.

The key of a conversation is HKDF-SHA256 (RFC 5869) with the server secret
(`MARINA_SECRET_KEY`, Django's SECRET_KEY) as input keying material and the
conversation's own material as `info`:

the full 256-bit base digest of the key chain, SHA-256 over the caller's
name, the body's seed, the requested model id, the `x-marina-session` value
(when sent), the system text, the tool schemas and the first user message.
The row key shows the first 96 bits of that digest; the other 160 are stored
nowhere. So the database alone cannot open a row, nor the database with the
server secret without the conversation's opening.

A row sealed under a secret listed in SECRET_KEY_FALLBACKS still opens (so
the secret can be rotated), and is sealed under SECRET_KEY when next
written. A row written before sealing (plain JSON) is read as it is and
sealed when next written. A row that opens under no secret (the secret was
changed without a fallback) is treated as no state: the formations start the
conversation's ledger afresh, as when the store fails (fail open)."""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from django.conf import settings

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

FIELD = "sealed"
VERSION = "v1"
NONCE_BYTES = 12
_SALT = b"marina/formation-state/v1"  # HKDF's salt: these keys are for nothing else
_AAD = b"marina formation state v1"


@lru_cache(maxsize=1)
def _aead() -> tuple[type[AESGCM], type[Exception]]:
    """cryptography's AES-GCM and its failed-tag error, imported at the first
    seal or open: its Rust library is ~6 MB of every worker's memory
    (/proc/PID/smaps), which a worker that serves no formation with state
    (plain calls, a burst of thousands of streams) never needs."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM, InvalidTag


@lru_cache(maxsize=8)
def _prk(secret: str) -> bytes:
    """HKDF-Extract(salt, secret)."""
    return hmac.new(_SALT, secret.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()


def derive(secret: str, material: bytes) -> bytes:
    """HKDF-SHA256(secret, salt, info=material), 32 bytes: one block of HKDF-Expand."""
    return hmac.new(_prk(secret), material + b"\x01", hashlib.sha256).digest()


def _server_secrets() -> list[str]:
    return [str(settings.SECRET_KEY), *(str(s) for s in getattr(settings, "SECRET_KEY_FALLBACKS", ()) or ())]


class Sealer:
    """Seals and opens one conversation's state. `material` is never stored;
    `secrets` (tests) default to SECRET_KEY then SECRET_KEY_FALLBACKS."""

    __slots__ = ("_keys", "_material", "_secrets")

    def __init__(self, material: bytes, secrets: Sequence[str] | None = None) -> None:
        self._material = material
        self._secrets = list(secrets) if secrets is not None else None
        self._keys: dict[int, bytes] = {}

    def __repr__(self) -> str:  # never the material or a key
        return "Sealer()"

    def _secret_list(self) -> list[str]:
        return self._secrets if self._secrets is not None else _server_secrets()

    def _key(self, index: int, secrets: list[str]) -> bytes:
        key = self._keys.get(index)
        if key is None:
            key = self._keys[index] = derive(secrets[index], self._material)
        return key

    def seal(self, plain: bytes) -> str:
        """The row's state, as JSON text, for the state's JSON bytes."""
        nonce = os.urandom(NONCE_BYTES)
        aesgcm, _invalid_tag = _aead()
        box = aesgcm(self._key(0, self._secret_list())).encrypt(nonce, plain, _AAD)
        encoded = base64.b64encode(nonce + box).decode("ascii")
        return f'{{"{FIELD}": "{VERSION}:{encoded}"}}'

    def open(self, stored: Mapping[str, Any]) -> bytes | None:
        """The state's JSON bytes; None when `stored` is not sealed (a plain
        row, written before sealing). Raises Unreadable when no secret opens it."""
        value = stored.get(FIELD)
        if not isinstance(value, str) or len(stored) != 1:
            return None
        version, _, encoded = value.partition(":")
        try:
            raw = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise Unreadable("not base64") from None
        if version != VERSION or len(raw) <= NONCE_BYTES:
            raise Unreadable("unknown format")
        nonce, box = raw[:NONCE_BYTES], raw[NONCE_BYTES:]
        secrets = self._secret_list()
        aesgcm, invalid_tag = _aead()
        for index in range(len(secrets)):
            try:
                return aesgcm(self._key(index, secrets)).decrypt(nonce, box, _AAD)
            except invalid_tag:
                continue
        raise Unreadable("no secret opens it")


class Unreadable(Exception):
    """A sealed row that cannot be opened here (the reason names no content)."""


def is_sealed(stored: Any) -> bool:
    return isinstance(stored, Mapping) and len(stored) == 1 and isinstance(stored.get(FIELD), str)
