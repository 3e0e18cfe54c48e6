"""Relay an upstream SSE stream to the client, metering it on the way.

Events are passed on as they complete. Usage comes from the final chunk; when
Marina itself asked for it (the client did not set
stream_options.include_usage), the usage-only chunk is kept from the client."""
from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from ledger.spend.records import SpanRecord
from passthru.errors import UpstreamError
from passthru.pricing import Usage, price, usage_from
from passthru.providers import Route

DONE = b"data: [DONE]\n\n"


def wants_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def with_usage_requested(body: dict[str, Any]) -> dict[str, Any]:
    options = body.get("stream_options")
    return {**body, "stream_options": {**(options if isinstance(options, dict) else {}), "include_usage": True}}


def error_event(message: str, kind: str) -> bytes:
    payload = {"error": {"message": message, "type": "server_error", "param": None, "code": "upstream_error"}}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


class Meter:
    """Watches the events going by: first-token time, usage, the end marker."""

    def __init__(self, route: Route, span: SpanRecord, *, hide_usage_chunk: bool) -> None:
        self.route = route
        self.span = span
        self.hide_usage_chunk = hide_usage_chunk
        self.started = time.perf_counter()
        self.usage: Usage | None = None

    def keep(self, event: bytes) -> bool:
        """Record what the event says; False if the client must not see it."""
        if self.span.ttft_ms is None:
            self.span.ttft_ms = (time.perf_counter() - self.started) * 1000
        data = event.strip()
        if data == b"data: [DONE]":
            return False  # Marina writes the one [DONE] itself, last
        # Only chunks that carry a usage object are parsed; the rest pass untouched.
        if b'"usage"' not in data or not data.startswith(b"data:"):
            return True
        try:
            chunk = json.loads(data[5:])
        except ValueError:
            return True
        usage = usage_from(chunk.get("usage")) if isinstance(chunk, dict) else None
        if usage is None:
            return True
        price(usage, provider=self.route.provider.name, upstream_model=self.route.upstream_model, reported=chunk["usage"])
        self.usage = usage
        return not (self.hide_usage_chunk and not chunk.get("choices"))


async def relay(chunks: AsyncIterator[bytes], meter: Meter) -> AsyncIterator[bytes]:
    """Re-cut raw bytes into whole SSE events and yield the ones to pass on
    (the closing [DONE] is the caller's to send, after it has traced the call).

    A transport failure mid-stream becomes an OpenAI-shaped error event (the
    status line has already gone out); the UpstreamError is re-raised after it
    so the caller can trace it."""
    buffer = b""
    try:
        async for raw in chunks:
            buffer += raw.replace(b"\r\n", b"\n")
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                if event and meter.keep(event):
                    yield event + b"\n\n"
        if buffer.strip() and meter.keep(buffer):
            yield buffer.strip() + b"\n\n"
    except UpstreamError as exc:
        yield error_event(exc.message, exc.kind)
        raise


class Pump:
    """Reads an event source in a task of its own; the request's task only
    takes the events (`next`).

    A client that leaves cancels the request's task (Django's handlers do,
    marina/mounts.py's too). Were that task reading the upstream, the cancellation
    would cut the read and the connection with it: a stream whose usage chunk
    was still to come would go unmetered. Read here, the upstream can be read
    on to its end after the client left (`discard`, then wait on `task`), and
    cut only when the caller cancels `task`. Costs one task per stream and one
    extra task step per event."""

    ROOM = 64  # events held for a slow client before the pump waits for it

    def __init__(self, source: AsyncIterator[bytes]) -> None:
        self._source = source
        # A list, not a deque: it holds at most ROOM events, and an empty deque is
        # 0.6 KB of each of the thousands of streams a worker may hold (docs/performance.md).
        self._events: list[bytes] = []
        self._waiter: asyncio.Future[None] | None = None  # the reader's, while it waits
        self._room: asyncio.Future[None] | None = None  # the pump's, while the reader catches up
        self._discarding = False
        self.ended = False
        self.error: BaseException | None = None  # what ended the source, for the reader to raise
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            async for event in self._source:
                if self._discarding:
                    continue  # metered on the way (the source is the Meter's relay); nobody to send it to
                self._events.append(event)
                self._wake()
                if len(self._events) >= self.ROOM:
                    self._room = asyncio.get_running_loop().create_future()
                    await self._room
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.error = exc
        finally:
            self.ended = True
            self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def next(self) -> bytes | None:
        """The next event; None at the end; the source's error re-raised."""
        while True:
            if self._events:
                event = self._events.pop(0)
                if self._room is not None and not self._room.done():
                    self._room.set_result(None)
                return event
            if self.ended:
                if self.error is not None:
                    raise self.take_error()
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def take_error(self) -> BaseException:
        """The source's error, let go of as it is read (once the pump has ended
        with one): its traceback holds the pump's frames, which hold the pump, so
        kept here it made a cycle that held the request until the collector's
        next pass. `next` raises it without naming it in a local, for the same
        reason."""
        error, self.error = self.error, None
        assert error is not None
        return error

    def discard(self) -> None:
        """The reader is gone: read on, keeping nothing."""
        self._discarding = True
        self._events.clear()
        if self._room is not None and not self._room.done():
            self._room.set_result(None)
