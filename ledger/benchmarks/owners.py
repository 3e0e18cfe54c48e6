"""Who may read and write a benchmark run (issue 42 C3).

A run filed by a Marina key (POST /v1/benchmarks/runs) is that key's: it (an
operator key: with its callers' `NAME/…`) and keys made with `--read-all`
read it; no other key reads it or files a run into its replicate group.
A run imported by the operator's command line has no key (`key_name` blank):
every key reads it, as before runs had owners, and no key files into its group."""
from __future__ import annotations

from django.db.models import Q

from ledger.spend.selectors import owned_by, owns

OPERATORS = ""  # key_name of the runs the command line imported


def visible_to(owner: str | None) -> Q:
    """The runs a reader sees: None (read-all, staff) sees every one (an empty
    Q: filter by it, never exclude by it, which Django reads as no condition)."""
    if owner is None:
        return Q()
    return Q(key_name=OPERATORS) | owned_by(owner)


def writable_by(owner: str) -> Q:
    """The runs beside which `owner` may file one (into their group)."""
    return owned_by(owner)


def may_read(owner: str | None, key_name: str) -> bool:
    """visible_to, for one run's key_name."""
    return owner is None or key_name == OPERATORS or owns(owner, key_name)
