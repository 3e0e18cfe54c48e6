"""The table behind `manage.py create_key` (ledger.models.ApiKey): passthru/auth.py's
only door to it. Digests in, names out; a secret never reaches this module."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import IntegrityError, transaction

from ledger.models import ApiKey


class KeyNameTaken(ValueError):
    pass


@dataclass(frozen=True)
class StoredKey:
    name: str
    prefix: str
    created_at: datetime
    revoked_at: datetime | None


def active_keys() -> dict[bytes, str]:
    """sha256 digest -> name of every key not revoked."""
    rows = ApiKey.objects.filter(revoked_at__isnull=True).values_list("digest", "name")
    return {bytes.fromhex(digest): name for digest, name in rows}


def store_key(name: str, digest: bytes, prefix: str) -> None:
    """Record a new key; KeyNameTaken when a key (even a revoked one) has the name."""
    try:
        with transaction.atomic():
            ApiKey.objects.create(name=name, digest=digest.hex(), prefix=prefix)
    except IntegrityError:
        raise KeyNameTaken(f"a key named {name!r} exists already (revoked keys keep their names)") from None


def revoke(name: str) -> bool:
    """Revoke the named key; False when no active key has that name."""
    return bool(ApiKey.objects.filter(name=name, revoked_at__isnull=True).update(revoked_at=datetime.now(UTC)))


def listed() -> list[StoredKey]:
    return [StoredKey(k.name, k.prefix, k.created_at, k.revoked_at) for k in ApiKey.objects.order_by("name")]
