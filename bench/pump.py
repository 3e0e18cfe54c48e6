"""What reading an upstream call in a task of its own costs (so that a client
that leaves does not cut it, and it can be read on and metered): for a
stream, events taken through passthru/streaming.Pump against the same events
taken straight from the source generator; for a plain call, a reply awaited
through `asyncio.shield` of a task (passthru/calls.call_json) against the
same coroutine awaited directly. In the same run, on uvloop as gunicorn runs it.

    .venv/bin/python bench/pump.py              # ~10 s
    .venv/bin/python bench/pump.py --streams 5000 --events 19

Each stream is `--events` events (19: a role chunk, 16 content chunks, the
finish chunk and the usage chunk, as bench/fake_upstream.py streams), each
source step awaiting a completed future (as the upstream transport's read
does when data is already there). Reported: CPU microseconds per stream and
per event, direct and through the Pump, and the difference."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EVENT = b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"word "}}]}\n\n'


async def _source(events: int) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    for _ in range(events):
        ready = loop.create_future()
        loop.call_soon(ready.set_result, None)  # the transport's data arrives on the next loop turn
        await ready
        yield EVENT


async def _direct(events: int) -> int:
    taken = 0
    async for _event in _source(events):
        taken += 1
    return taken


async def _pumped(events: int) -> int:
    from passthru.streaming import Pump

    pump = Pump(_source(events))
    taken = 0
    while await pump.next() is not None:
        taken += 1
    return taken


async def _reply() -> bytes:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.call_soon(ready.set_result, None)
    await ready
    return EVENT


async def _plain(calls: int, shielded: bool) -> float:
    started = time.process_time()
    for _ in range(calls):
        if shielded:
            await asyncio.shield(asyncio.ensure_future(_reply()))
        else:
            await _reply()
    return (time.process_time() - started) / calls * 1e6


async def _run(streams: int, events: int, pumped: bool) -> float:
    one = _pumped if pumped else _direct
    started = time.process_time()
    for _ in range(streams):
        assert await one(events) == events
    return (time.process_time() - started) / streams * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=3000)
    parser.add_argument("--events", type=int, default=19)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marina.settings")  # passthru's modules read settings
    import uvloop

    results = {}
    for label, pumped in (("direct", False), ("pump", True), ("direct again", False), ("pump again", True)):
        results[label] = round(uvloop.run(_run(args.streams, args.events, pumped)), 1)
    direct = min(results["direct"], results["direct again"])
    pump = min(results["pump"], results["pump again"])
    for label, us in results.items():
        print(f"  {label:13} {us:8.1f} µs CPU/stream  {us / args.events:6.2f} µs/event")
    print(f"  the Pump adds {pump - direct:.1f} µs CPU per stream of {args.events} events "
          f"({(pump - direct) / args.events:.2f} µs/event; {pump / direct:.2f}× the direct read)")
    plain = {label: uvloop.run(_plain(args.streams * 10, shielded)) for label, shielded in (("plain direct", False), ("plain shielded", True))}
    added = plain["plain shielded"] - plain["plain direct"]
    print(f"  a plain call awaited through a shielded task: +{added:.1f} µs CPU "
          f"({plain['plain direct']:.1f} → {plain['plain shielded']:.1f} µs)")
    print(json.dumps({"direct_us": direct, "pump_us": pump, "events": args.events, "plain_added_us": round(added, 1)}))


if __name__ == "__main__":
    main()
