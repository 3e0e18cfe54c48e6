"""Marina without a socket, for the tests whose subject is what Marina answers
(routing, formations, errors, metering), not the connection it answers on.

Two halves (tests/conftest.py's `marina` fixture puts them together):

- `ScriptedTransport`: the scripted upstream (tests/upstream.py) answering as an
  httpx transport, injected through passthru/upstream.py's seam (`use_transport`).
  The same script, the same record of requests (`upstream.requests`), the same
  answers: a reset is the ReadError passthru/wire.py raises for one, and a wait
  longer than the request's read timeout is its ReadTimeout, after that timeout.
  Requests to any other address (a dead port, another server) go over the
  network through Marina's own transport, as they would without the seam.
- `AsgiBridge`: a sync httpx transport that hands each request to Marina's ASGI
  application (marina.asgi.application: intake, doors and Django, as gunicorn
  runs it) through httpx's ASGITransport, on one event loop in a thread, as
  uvicorn's thread runs it for `marina_url`. The openai and anthropic SDKs and
  httpx.Client drive it from a sync test. The answer is read whole before the
  test sees it: a stream's events all arrive, but not one by one.

What stays on a live socket (`marina_url`): the socket itself (disconnects,
streaming cancellation, back-pressure, leaks), real client libraries' own HTTP
stacks (LiteLLM, retries), and process-level faults."""
from __future__ import annotations

import asyncio
import threading
import zlib
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from tests.upstream import Received, Reply, Reset, ScriptedUpstream, Sse, sse_events, sse_frame

# Long enough for any test's slowest answer, short enough that a hang fails the test.
_CALL_LIMIT = 120.0


class _Answer(httpx.AsyncByteStream):
    """A scripted body; records how it ended as the socket handler does (client_gone: Marina
    closed it before its end)."""

    def __init__(self, pieces: AsyncIterator[bytes], received: Received) -> None:
        self.pieces, self.received = pieces, received

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in self.pieces:
            yield piece

    async def aclose(self) -> None:
        await self.pieces.aclose()
        if self.received.outcome == "pending":
            self.received.outcome = "client_gone"


async def _wait(seconds: float, read_timeout: float | None) -> None:
    """Send nothing for `seconds`: past the read timeout, the ReadTimeout the network would give."""
    if read_timeout is not None and seconds > read_timeout:
        await asyncio.sleep(read_timeout)
        raise httpx.ReadTimeout(f"The scripted upstream sent nothing for {read_timeout:g}s.")
    if seconds:
        await asyncio.sleep(seconds)


class ScriptedTransport(httpx.AsyncBaseTransport):
    """The scripted upstream's steps answered in-process (see the module's docstring)."""

    def __init__(self, upstream: ScriptedUpstream) -> None:
        self.upstream = upstream
        assert upstream.server is not None
        self.address = ("127.0.0.1", upstream.server.server_address[1])
        self._network: dict[asyncio.AbstractEventLoop, httpx.AsyncBaseTransport] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if (request.url.host, request.url.port) != self.address:
            return await self._elsewhere(request)
        raw = await request.aread()
        received, step = self.upstream.take(request.url.raw_path.decode("ascii"), request.headers.items(), raw)
        read_timeout = request.extensions.get("timeout", {}).get("read")
        if isinstance(step, Reset):
            received.outcome = "reset"
            raise httpx.ReadError("The connection to the provider failed: the scripted upstream reset it.")
        if isinstance(step, Sse):
            return await self._sse(step, request, received, read_timeout)
        return await self._reply(step, received, read_timeout)

    async def _reply(self, step: Reply, received: Received, read_timeout: float | None) -> httpx.Response:
        import json

        await _wait(step.delay, read_timeout)
        data = step.raw if step.raw is not None else json.dumps(step.json).encode()
        headers = [("content-type", step.content_type), ("content-length", str(len(data))), *step.headers.items()]
        if not self.upstream.keep_alive:
            headers.append(("connection", "close"))

        async def pieces() -> AsyncIterator[bytes]:
            size = max(1, -(-len(data) // step.pieces)) if step.trickle else max(1, len(data))
            for start in range(0, len(data), size):
                if start:
                    await _wait(step.trickle, read_timeout)
                yield data[start : start + size]
            received.outcome = "complete"

        return httpx.Response(step.status, headers=headers, stream=_Answer(pieces(), received))

    async def _sse(self, step: Sse, request: httpx.Request, received: Received, read_timeout: float | None) -> httpx.Response:
        if step.until is not None:
            await asyncio.to_thread(step.until.wait, step.delay)
        else:
            await _wait(step.delay, read_timeout)
        gzipped = step.gzip == "always" or (step.gzip == "if-asked" and "gzip" in request.headers.get("accept-encoding", ""))
        headers = [("content-type", step.content_type), ("cache-control", "no-cache"), ("connection", "close")]
        if gzipped:
            headers.append(("content-encoding", "gzip"))
        chunks = sse_events(step, received.body)
        squeeze = zlib.compressobj(wbits=31) if gzipped else None

        def wire(data: bytes) -> bytes:
            return data if squeeze is None else squeeze.compress(data) + squeeze.flush(zlib.Z_SYNC_FLUSH)

        async def pieces() -> AsyncIterator[bytes]:
            for i, chunk in enumerate(chunks):
                if step.reset_after is not None and i == step.reset_after:
                    received.outcome = "reset"
                    raise httpx.ReadError("The connection to the provider failed: the scripted upstream reset it.")
                if step.stall_after is not None and i == step.stall_after:
                    await _wait(step.stall_seconds, read_timeout)
                    received.outcome = "stalled"
                    return  # the socket handler closes the connection: the body ends there
                if step.usage_delay and i == len(chunks) - 1 and "usage" in chunk:
                    await _wait(step.usage_delay, read_timeout)
                yield wire(sse_frame(chunk, step.named))
                await _wait(step.gap, read_timeout)
            if step.done:
                yield wire(b"data: [DONE]\n\n")
            if squeeze is not None:
                yield squeeze.flush()
            received.outcome = "complete"

        return httpx.Response(200, headers=headers, stream=_Answer(pieces(), received))

    async def _elsewhere(self, request: httpx.Request) -> httpx.Response:
        from passthru.wire import LeanTransport

        loop = asyncio.get_running_loop()
        if loop not in self._network:
            self._network[loop] = LeanTransport()
        return await self._network[loop].handle_async_request(request)

    async def aclose(self) -> None:
        for transport in self._network.values():
            await transport.aclose()
        self._network.clear()


class AsgiBridge(httpx.BaseTransport):
    """A sync httpx transport that calls an ASGI application on an event loop in another thread."""

    def __init__(self, app: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.asgi = httpx.ASGITransport(app=app)
        self.loop = loop

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()  # a ByteStream now, which ASGITransport can iterate

        async def call() -> tuple[int, list[tuple[bytes, bytes]], bytes]:
            response = await self.asgi.handle_async_request(request)
            # Raw bytes: a compressed answer reaches the client compressed, as over a socket.
            body = b"".join([piece async for piece in response.stream])
            return response.status_code, response.headers.raw, body

        status, headers, body = asyncio.run_coroutine_threadsafe(call(), self.loop).result(_CALL_LIMIT)
        return httpx.Response(status, headers=headers, stream=httpx.ByteStream(body), request=request)

    def run(self, coroutine: Any) -> Any:
        """Run a coroutine on Marina's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(_CALL_LIMIT)


@contextmanager
def event_loop_thread() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running in a daemon thread, stopped and closed on exit."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="in-process-marina", daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


class InProcessMarina:
    """What tests/conftest.py's `marina` fixture gives: Marina's application behind an AsgiBridge."""

    url = "http://127.0.0.1"  # a host Marina's ALLOWED_HOSTS admits; nothing listens there

    def __init__(self, bridge: AsgiBridge, key: str) -> None:
        self.bridge, self.key = bridge, key
        self.http = self.client()

    def client(self, **options: Any) -> httpx.Client:
        """An httpx.Client to Marina (base_url set: `marina.http.post("/v1/chat/completions", ...)`)."""
        return httpx.Client(transport=self.bridge, base_url=self.url, **options)

    def openai(self, key: str | None = None, **options: Any) -> Any:
        """The openai SDK at /v1 with a key (the test key unless told), no retries."""
        import openai

        http_client = httpx.Client(transport=self.bridge)
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=self.key if key is None else key, max_retries=0, http_client=http_client, **options)

    def anthropic(self, **options: Any) -> Any:
        """The anthropic SDK at Marina's root, with the options given (api_key or auth_token, max_retries)."""
        import anthropic  # here: importing it costs every worker's collection a second
        import httpx2  # the anthropic SDK's own fork of httpx, which takes no httpx object

        bridge = self.bridge

        class Httpx2Bridge(httpx2.BaseTransport):
            def handle_request(self, request: httpx2.Request) -> httpx2.Response:
                sent = httpx.Request(request.method, str(request.url), headers=request.headers.raw, content=request.read())
                answer = bridge.handle_request(sent)
                body = b"".join(answer.iter_raw())
                return httpx2.Response(answer.status_code, headers=answer.headers.raw, stream=httpx2.ByteStream(body))

        return anthropic.Anthropic(base_url=self.url, http_client=httpx2.Client(transport=Httpx2Bridge()), **options)

    def close(self) -> None:
        self.http.close()
