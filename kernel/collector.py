"""Python's cycle collector, run by a worker once a second on its event loop
instead of by allocation counts.

Why (docs/performance.md, issue 45): in a burst of thousands of streams every
object a request allocates lives until its stream ends, and is freed then by
reference counting, not by the collector (tests/passthru/test_wire.py). The
automatic collector scanned each of those objects young and again
middle-aged while the burst was still being taken in (~12 % of the intake's
CPU), found nothing, and a full collection, when one fell in the wave of
first tokens, held them up. A collection costs 0.7-0.9 s of a worker's CPU
per million objects it scans, wherever it runs: what a schedule can choose
is when. On this one (nine 10,000-stream runs alternated with the automatic
collector's) the first token came 10.00-10.03 s after the last request was
begun, against up to 10.45 s, and its p99 was 12.72 s against 13.12 s at the
median.

So a worker turns the automatic collector off and, once a second:
- defers while a burst is being taken in (more than `burst` tracked objects
  allocated, net, since the last look), unless `ceiling` of them wait or
  the last collection found that much garbage;
- otherwise collects the young and middle generations in one pass;
- and, outside a burst, the oldest generation instead, once what reached it
  since the last full collection outnumbers what that one left (and
  `full_floor`). CPython runs one at every quarter's growth: a burst of
  streams growing a worker's heap fourfold got several, scanning all of it
  each time for nothing.

What it costs: a cycle waits a second, or to the end of a burst's intake with
no more than `ceiling` objects waiting; one that reached the oldest
generation waits for the next full collection. Failed requests made such
cycles (an error kept where its traceback's frames could reach it: the
connection, the pump, the task that made the call); they are broken where
they were made, and tests/passthru/test_errors.py holds each kind of failure
to leaving none. The
collections run on the event loop's thread, finalisers included (the
automatic ones ran on whichever thread allocated)."""
from __future__ import annotations

import asyncio
import gc
from dataclasses import dataclass

EVERY_SECONDS = 1.0
# Taking a stream in leaves ~127 tracked objects; a worker takes ~2,500 a
# second in a burst (300,000 objects), and under steady load the net growth is
# near nothing, since requests' objects are freed as they end.
BURST_OBJECTS = 20_000
# A collection runs at this many young objects, burst or not: ~8,000 streams'
# worth, more than a worker's share of 10,000 (~650,000 objects at a 65 %
# split), and a bound on what a flood of failing requests can leave waiting.
CEILING_OBJECTS = 1_000_000
# Under steady load each look moves the calls in flight to the oldest
# generation, where they die by reference counting; below this a small heap
# would be scanned whole every few seconds.
FULL_FLOOR_OBJECTS = 100_000


@dataclass
class Collector:
    burst: int = BURST_OBJECTS
    ceiling: int = CEILING_OBJECTS
    full_floor: int = FULL_FLOOR_OBJECTS
    young_at_last_look: int = 0
    promoted_since_full: int = 0
    left_by_last_full: int = 0
    found_by_last: int = 0  # unreachable objects the last collection found

    def tick(self) -> int | None:
        """Collect what is due now; the oldest generation collected, or None
        when the collection is deferred."""
        young = gc.get_count()[0]
        # Growth is a burst of objects that live on, unless the last collection
        # found garbage in that measure: then it is cycles (a flood of failing
        # calls, say), and waiting only lets them pile up.
        in_burst = young - self.young_at_last_look > self.burst and self.found_by_last < self.burst
        self.young_at_last_look = young
        if in_burst and young < self.ceiling:
            return None
        self.young_at_last_look = 0  # a collection empties the young generation
        self.promoted_since_full += young
        if not in_burst and self.promoted_since_full > max(self.left_by_last_full, self.full_floor):
            self.found_by_last = gc.collect(2)
            self.left_by_last_full = len(gc.get_objects(generation=2))
            self.promoted_since_full = 0
            return 2
        self.found_by_last = gc.collect(1)
        return 1


_task: asyncio.Task[None] | None = None  # held: the loop keeps only weak references to tasks


def start(every: float = EVERY_SECONDS) -> Collector:
    """Turn the automatic collector off and collect on this event loop every
    `every` seconds from now on; the schedule, for tests to look at."""
    global _task
    collector = Collector()
    gc.disable()
    _task = asyncio.get_running_loop().create_task(_collect_forever(collector, every), name="marina-collector")
    return collector


async def _collect_forever(collector: Collector, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        collector.tick()
