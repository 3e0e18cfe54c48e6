"""What a request leaves to run after its answer, finished before a worker
exits (marina/worker.py calls `finish` as it shuts down).

- A stream whose client left is read on in the background (passthru/calls.py
  `_drain`, bounded by MARINA_DRAIN_AFTER_DISCONNECT_SECONDS) and traced at its end.
- Traces go to the ledger's writer thread; the daily cap's releases follow
  once their traces are committed; then the worker gives its lease on the cap
  back (passthru/spendcap.py: else its room stays reserved until the row
  goes stale, LEASE_STALE_SECONDS)."""
from __future__ import annotations

import asyncio

from kernel import dbwriter
from passthru import spendcap
from passthru.calls import drains_finished


async def finish() -> None:
    await drains_finished()
    # Each thread runs its jobs in order: a job queued now ends after those before it.
    await asyncio.wrap_future(dbwriter.submit(lambda: None))
    await asyncio.wrap_future(spendcap.submit(spendcap.give_back))  # this worker's lease: room for the others
