"""Turns: how many calls (POSTs to /v1's doors) a worker works on at once
before their provider has them. Reads (health, the model list, the ledger's
API) take no turn: they never queue behind a burst of calls.

Why (docs/performance.md, issue 45). An event loop runs, in each of its
iterations, the first step of every request that arrived during the one
before: about 1 ms of CPU each (the Django request, the body parsed, routing,
pricing, the cap) up to the upstream connect. A request needs a few more
iterations (the connect, the connection's set-up) before its body is written.
In a burst the iterations grow with the arrivals, so under 10,000 new streams
the writes waited for the end of the burst: requests taken in at 0 s reached
the provider 8 s later with the last ones, each holding its parsed and
encoded body (~130 KB) meanwhile, and their first tokens came 11 s late.

So a call takes a turn once its body is read (marina/mounts.py) and gives
it back once its upstream call is written (passthru/upstream.py), in the
iteration after it starts waiting for a connection, pooled or new (the
network's time, or another call's: a provider that does not answer its
connects holds no turn), or when it ends, whichever comes first. At most MARINA_INTAKE_TURNS requests of a
worker hold one; the others wait, in the order they came, holding only their
body's bytes. Two iterations then run at most that many first steps, the loop
polls in between, and the requests reach their provider in the order they
came, each a few iterations after its turn began. 0 turns the limit off.

Turns are counted per event loop (a worker has one; tests run several)."""
from __future__ import annotations

import asyncio
import weakref
from collections import deque
from contextvars import ContextVar

from django.conf import settings


class Gate:
    """Turns on one event loop: `limit` at once, handed on in arrival order."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self.waiting: deque[asyncio.Future[None]] = deque()

    async def enter(self) -> Turn:
        """A turn for the current request (waiting for one if all are held),
        which `leave()` then gives back."""
        if self.held < self.limit and not self.waiting:
            self.held += 1
        else:
            ticket = asyncio.get_running_loop().create_future()
            self.waiting.append(ticket)
            try:
                await ticket  # set when a turn is handed on to it: `held` counts it already
            except asyncio.CancelledError:  # the client went away meanwhile
                if ticket.done() and not ticket.cancelled():
                    self._hand_on()  # handed a turn, then cancelled: the next one takes it
                else:
                    self.waiting.remove(ticket)
                raise
        turn = Turn(self)
        _current.set(turn)
        return turn

    def _hand_on(self) -> None:
        """A turn given back: to the longest waiting request, if any (and the
        limit, if lowered meanwhile, allows)."""
        while self.waiting and self.held <= self.limit:
            ticket = self.waiting.popleft()
            if not ticket.done():
                ticket.set_result(None)
                return
        self.held -= 1


class Turn:
    """One request's turn; leaving twice gives it back once."""

    __slots__ = ("gate", "left")

    def __init__(self, gate: Gate) -> None:
        self.gate = gate
        self.left = False

    def leave(self) -> None:
        if not self.left:
            self.left = True
            self.gate._hand_on()


_current: ContextVar[Turn | None] = ContextVar("marina_turn", default=None)
_gates: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Gate] = weakref.WeakKeyDictionary()


async def enter() -> Turn | None:
    """The current request's turn on this loop (None: no limit set)."""
    limit = settings.MARINA_INTAKE_TURNS
    if not limit:
        return None
    loop = asyncio.get_running_loop()
    gate = _gates.get(loop)
    if gate is None:
        gate = _gates[loop] = Gate(limit)
    gate.limit = limit  # a changed setting applies as turns are taken and handed on
    return await gate.enter()


def leave() -> None:
    """Give back the current request's turn, if it holds one: its provider
    has the request."""
    turn = _current.get()
    if turn is not None:
        turn.leave()


def leave_soon() -> None:
    """Give back the current request's turn, if it holds one, once the event
    loop has polled its sockets again: the request now waits for the network
    (a connect) or for another call (a pooled connection). At once, the turn
    would only ever be held within one step, and bound nothing: the next
    request's first step would run in the same iteration, as would the one
    after, and the loop would not poll until the burst had all been taken in."""
    turn = _current.get()
    if turn is not None:
        asyncio.get_running_loop().call_soon(turn.leave)

