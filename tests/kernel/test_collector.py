"""kernel/collector.py: a worker's cycle collector runs on a clock, deferred
while a burst is being taken in, bounded by a ceiling, with a full collection
once the oldest generation has doubled (docs/performance.md, issue 45)."""
from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from pathlib import Path

import pytest

from kernel.collector import Collector

ROOT = Path(__file__).resolve().parents[2]


class Node:
    """A cycle: only the collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def by_hand():
    """The automatic collector off, as in a worker, for the test's length."""
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    yield
    if was:
        gc.enable()


def test_a_quiet_tick_frees_a_cycle(by_hand):
    gone = weakref.ref(Node())
    assert gone() is not None
    assert Collector().tick() == 1
    assert gone() is None


def test_a_tick_in_a_burst_defers_and_the_next_quiet_one_collects(by_hand):
    collector = Collector(burst=1_000)
    collector.tick()
    gone = weakref.ref(Node())
    held = [[] for _ in range(5_000)]  # objects that live on, as a burst's streams do
    assert collector.tick() is None
    assert gone() is not None
    assert collector.tick() == 1
    assert gone() is None
    assert len(held) == 5_000


def test_the_ceiling_collects_even_in_a_burst_but_never_the_oldest_generation(by_hand):
    collector = Collector(burst=1_000, ceiling=4_000, full_floor=0)
    collector.tick()
    gone = weakref.ref(Node())
    held = [[] for _ in range(5_000)]
    assert collector.tick() == 1
    assert gone() is None
    assert len(held) == 5_000


def test_growth_is_not_deferred_once_a_collection_found_it_was_garbage(by_hand):
    collector = Collector(burst=1_000, ceiling=4_000)
    collector.tick()
    for _ in range(5_000):  # a flood of cycles: the ceiling collects them, and finds them
        Node()
    assert collector.tick() == 1
    assert collector.found_by_last >= 5_000
    gone = weakref.ref(Node())
    for _ in range(2_000):  # more of them, under the ceiling: collected now, not deferred
        Node()
    assert collector.tick() == 1
    assert gone() is None


def test_a_cycle_that_reached_the_oldest_generation_waits_for_a_full_collection(by_hand):
    collector = Collector(full_floor=10**9)
    kept = Node()
    gone = weakref.ref(kept)
    assert collector.tick() == 1  # kept is now in the oldest generation
    del kept
    assert collector.tick() == 1
    assert gone() is not None
    collector.full_floor = 0
    assert collector.tick() == 2
    assert gone() is None


def test_the_next_full_collection_waits_until_what_the_last_one_left_has_doubled(by_hand):
    collector = Collector(full_floor=0, burst=10**9)  # never a burst here
    kept = [[] for _ in range(1_000)]
    assert collector.tick() == 2
    left = collector.left_by_last_full
    assert left >= 1_000
    more = [[] for _ in range(left // 2)]
    assert collector.tick() == 1
    more += [[] for _ in range(left // 2 + 1_000)]  # now more than what the full collection left
    assert collector.tick() == 2
    assert collector.left_by_last_full > left
    assert len(kept) + len(more) > left


# As a worker runs it (marina/worker.py's MarinaServer.startup): in a process
# of its own, since the automatic collector is turned off for good. The
# garbage is what a failed request leaves: an exception kept in a local of the
# frame its traceback holds.
_SCRIPT = """
import asyncio, gc, weakref
from kernel import collector

class UpstreamRefused(Exception):
    pass

def failed_request():
    try:
        raise UpstreamRefused("connection refused")
    except UpstreamRefused as caught:
        error = caught
        return weakref.ref(error)

async def main():
    collector.start(every=0.05)
    gone = failed_request()
    alive_at_first = gone() is not None
    await asyncio.sleep(0.5)
    print(gc.isenabled(), alive_at_first, gone() is None)

asyncio.run(main())
"""


def test_a_started_collector_turns_the_automatic_one_off_and_frees_a_failed_request_s_cycle():
    done = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=ROOT, env={"PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True"]
