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
    reads_all: bool = False


@dataclass(frozen=True)
class Active:
    name: str
    reads_all: bool = False


def active_keys() -> dict[bytes, Active]:
    """sha256 digest -> name (and read scope) of every key not revoked."""
    rows = ApiKey.objects.filter(revoked_at__isnull=True).values_list("digest", "name", "reads_all")
    return {bytes.fromhex(digest): Active(name, reads_all) for digest, name, reads_all in rows}


def store_key(name: str, digest: bytes, prefix: str, reads_all: bool = False) -> None:
    """Record a new key; KeyNameTaken when a key (even a revoked one) has the name."""
    try:
        with transaction.atomic():
            ApiKey.objects.create(name=name, digest=digest.hex(), prefix=prefix, reads_all=reads_all)
    except IntegrityError:
        raise KeyNameTaken(f"a key named {name!r} exists already (revoked keys keep their names)") from None


def revoke(name: str) -> bool:
    """Revoke the named key; False when no active key has that name."""
    return bool(ApiKey.objects.filter(name=name, revoked_at__isnull=True).update(revoked_at=datetime.now(UTC)))


def listed() -> list[StoredKey]:
    return [StoredKey(k.name, k.prefix, k.created_at, k.revoked_at, k.reads_all) for k in ApiKey.objects.order_by("name")]
