"""Errors the importers raise. Commands turn them into one stderr line and an
exit status (2 for bad input, 3 for a run refused by --require-clean)."""
from __future__ import annotations

from pathlib import Path


class LedgerInputError(ValueError):
    """An input the ledger cannot take: not JSON, truncated, wrong schema, no
    simulations... The message is one line naming the file and the problem,
    and never quotes the file's content (it may hold a credential)."""

    def __init__(self, source: str | Path, problem: str) -> None:
        self.source = str(source)
        self.problem = problem
        super().__init__(f"{self.source}: {problem}")


class GroupTakenError(ValueError):
    """A key filing a run into a replicate group that holds a run it did not
    file (ledger/benchmarks/owners.py). Names the group, never the other key."""

    def __init__(self, group: str) -> None:
        self.group = group
        super().__init__(f"The replicate group {group!r} holds runs another key filed: file into a group of your own.")


class UncleanRunError(Exception):
    """--require-clean met a run with infrastructure errors."""

    def __init__(self, source: str | Path, infra_errors: int) -> None:
        self.source = str(source)
        self.infra_errors = infra_errors
        super().__init__(f"{self.source}: INVALID: {infra_errors} infrastructure error(s)")
