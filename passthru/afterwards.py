"""What a request leaves to run after its answer, finished before a worker
exits (marina/worker.py calls `finish` as it shuts down).

- A stream whose client left is read on in the background (passthru/calls.py
  `_drain`, bounded by MARINA_DRAIN_AFTER_DISCONNECT_SECONDS) and traced at its end.
- Traces go to the ledger's writer thread; the daily cap's releases, queued
  once their traces are committed, to the cap's thread
  (passthru/spendcap.py). A release lost would leave its hold counted for an
  hour."""
from __future__ import annotations

import asyncio

from ledger.spend import services
from passthru import spendcap
from passthru.calls import drains_finished


async def finish() -> None:
    await drains_finished()
    # Each thread runs its jobs in order: a job queued now ends after those before it.
    await asyncio.wrap_future(services.submit(lambda: None))
    await asyncio.wrap_future(spendcap.submit(lambda: None))
