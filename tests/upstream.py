"""A scripted OpenAI-compatible upstream on 127.0.0.1, for tests and benches.

It answers POST /v1/chat/completions from a queue of scripted steps (JSON
replies, SSE streams, errors, delays, resets, stalls) or, when the queue is
empty, with a default completion; and it records every request it received.

    up = ScriptedUpstream().start()
    up.script(Reply(json=completion("hi")), Reset())
    ... point a provider's base URL at up.base_url ...
    up.requests[0].body["reasoning_effort"]
"""
from __future__ import annotations

import json
import socket
import struct
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def completion(
    content: str | None = "Hello from the scripted upstream.",
    *,
    model: str = "scripted-model",
    tool_calls: list[dict[str, Any]] | None = None,
    prompt_tokens: int = 12,
    completion_tokens: int = 5,
    cached_tokens: int = 0,
    reasoning_tokens: int = 0,
    cost: float | None = None,
) -> dict[str, Any]:
    """An OpenAI chat.completion object."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": reasoning_tokens},
    }
    if cost is not None:
        usage["cost"] = cost
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}],
        "usage": usage,
    }


def tool_call(name: str, arguments: dict[str, Any], call_id: str = "call_1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def sse_chunks(text: str = "Hello there, streamed.", *, model: str = "scripted-model", pieces: int = 4) -> list[dict[str, Any]]:
    """Content delta chunks, then a finish chunk (no usage chunk: see Sse)."""
    step = max(1, len(text) // pieces)
    parts = [text[i : i + step] for i in range(0, len(text), step)]
    base = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    chunks += [{**base, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in parts]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return chunks


@dataclass
class Reply:
    json: Any = None
    status: int = 200
    delay: float = 0.0  # seconds before the first byte
    raw: bytes | None = None  # sent instead of json
    content_type: str = "application/json"
    # Seconds between the body's pieces: a provider that trickles its answer,
    # each gap shorter than an idle timeout, the whole longer than a deadline.
    trickle: float = 0.0
    pieces: int = 10
    headers: dict[str, str] = field(default_factory=dict)  # more response headers (Retry-After)


@dataclass
class Sse:
    chunks: list[dict[str, Any]] | None = None  # default: sse_chunks()
    usage: dict[str, Any] | None = field(default_factory=lambda: {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17})
    delay: float = 0.0
    gap: float = 0.0  # seconds between chunks
    stall_after: int | None = None  # stop sending (but keep the socket open) after N chunks
    stall_seconds: float = 30.0
    reset_after: int | None = None  # reset the connection after N chunks
    done: bool = True
    # gzip the stream: "if-asked" (the request's Accept-Encoding names gzip, as
    # real providers do) or "always" (a provider that ignores what was asked).
    gzip: str = ""
    content_type: str = "text/event-stream"
    usage_delay: float = 0.0  # seconds between the finish chunk and the usage chunk
    # Set: the first byte waits for this event instead (at most `delay` seconds), so
    # a test looks at a waiting stream for as long as it needs, however slow the machine.
    until: threading.Event | None = None
    # Name each event after its chunk's "type" (`event: response.created`), as
    # the Responses and Anthropic streams do; they send no [DONE] (done=False).
    named: bool = False


def sse_events(step: Sse, body: Any) -> list[dict[str, Any]]:
    """The chunks an Sse step sends for this request body: its own, then a usage chunk when asked."""
    chunks = list(step.chunks if step.chunks is not None else sse_chunks())
    wants_usage = isinstance(body, dict) and (body.get("stream_options") or {}).get("include_usage")
    if wants_usage and step.usage is not None:
        base = {k: v for k, v in chunks[-1].items() if k != "choices"} if chunks else {"object": "chat.completion.chunk"}
        chunks.append({**base, "choices": [], "usage": step.usage})
    return chunks


def sse_frame(chunk: dict[str, Any], named: bool) -> bytes:
    """One event as it goes on the wire."""
    name = b"event: " + str(chunk.get("type", "")).encode() + b"\n" if named else b""
    return name + b"data: " + json.dumps(chunk).encode() + b"\n\n"


@dataclass
class Reset:
    """Close the connection with a TCP reset before answering."""


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any
    raw: bytes = b""  # the body's bytes as received
    # How the answer ended: pending, complete, reset, stalled, or client_gone
    # (Marina closed the connection before the reply was written out).
    outcome: str = "pending"


Step = Reply | Sse | Reset


class ScriptedUpstream:
    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.steps: deque[Step] = deque()
        self.handler: Callable[[Any], Step | None] | None = None  # decides per request when set
        # Decides per request from all of it (path, headers, body) when set: tests/scripted_providers.py.
        self.answer: Callable[[Received], Step | None] | None = None
        # False: close every connection after its reply, so that a connection
        # the client never closes shows up as CLOSE_WAIT (leak tests).
        self.keep_alive = True
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    # --- control -----------------------------------------------------------
    def start(self) -> ScriptedUpstream:
        upstream = self

        class Handler(_Handler):
            owner = upstream

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server:
            self.server.shutdown()
            self.server.server_close()

    @property
    def base_url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def script(self, *steps: Step) -> None:
        with self.lock:
            self.steps.extend(steps)

    def reset(self) -> None:
        with self.lock:
            self.steps.clear()
            self.requests.clear()
            self.handler = None
            self.answer = None
            self.keep_alive = True

    def take(self, path: str, headers: Iterable[tuple[str, str]], raw: bytes) -> tuple[Received, Step]:
        """Record a request and choose its answer: the socket's handler and the in-process
        transport (tests/in_process.py) both come through here."""
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        received = Received(path, {k.lower(): v for k, v in headers}, body, raw)
        with self.lock:
            self.requests.append(received)
        return received, self.next_step(body, received)

    def next_step(self, body: Any, received: Received | None = None) -> Step:
        with self.lock:
            if self.steps:
                return self.steps.popleft()
        if self.answer is not None and received is not None:
            step = self.answer(received)
            if step is not None:
                return step
        if self.handler is not None:
            step = self.handler(body)
            if step is not None:
                return step
        if isinstance(body, dict) and body.get("stream"):
            return Sse()
        return Reply(json=completion(model=str(body.get("model")) if isinstance(body, dict) else "scripted-model"))


class _Server(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: a burst of load-test
    # connections would be dropped and retried a second later.
    request_queue_size = 1024

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client killed mid-request (restart tests) is expected, not news.
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    owner: ScriptedUpstream
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        received, step = self.owner.take(self.path, self.headers.items(), self.rfile.read(length))
        body = received.body
        try:
            if isinstance(step, Reset):
                self._reset()
                received.outcome = "reset"
            elif isinstance(step, Sse):
                received.outcome = self._sse(step, body)
            else:
                self._reply(step)
                received.outcome = "complete"
        except (BrokenPipeError, ConnectionResetError):
            received.outcome = "client_gone"
            self.close_connection = True

    def _reset(self) -> None:
        # SO_LINGER 0 makes close() send RST instead of FIN.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True

    def _reply(self, step: Reply) -> None:
        time.sleep(step.delay)
        data = step.raw if step.raw is not None else json.dumps(step.json).encode()
        self.send_response(step.status)
        self.send_header("content-type", step.content_type)
        self.send_header("content-length", str(len(data)))
        for name, value in step.headers.items():
            self.send_header(name, value)
        if not self.owner.keep_alive:
            self.send_header("connection", "close")
            self.close_connection = True
        self.end_headers()
        if not step.trickle:
            self.wfile.write(data)
            return
        step_size = max(1, -(-len(data) // step.pieces))
        for start in range(0, len(data), step_size):
            self.wfile.write(data[start : start + step_size])
            self.wfile.flush()
            time.sleep(step.trickle)

    def _sse(self, step: Sse, body: Any) -> str:
        if step.until is not None:
            step.until.wait(step.delay)
        else:
            time.sleep(step.delay)
        accepted = self.headers.get("accept-encoding", "")
        gzipped = step.gzip == "always" or (step.gzip == "if-asked" and "gzip" in accepted)
        self.send_response(200)
        self.send_header("content-type", step.content_type)
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        if gzipped:
            self.send_header("content-encoding", "gzip")
        self.end_headers()
        self.close_connection = True
        squeeze = zlib.compressobj(wbits=31) if gzipped else None

        def write(data: bytes) -> None:
            # Each event flushed through the compressor, so it still arrives as it is sent.
            self.wfile.write(data if squeeze is None else squeeze.compress(data) + squeeze.flush(zlib.Z_SYNC_FLUSH))

        chunks = sse_events(step, body)
        for i, chunk in enumerate(chunks):
            if step.reset_after is not None and i == step.reset_after:
                self._reset()
                return "reset"
            if step.stall_after is not None and i == step.stall_after:
                time.sleep(step.stall_seconds)
                return "stalled"
            if step.usage_delay and i == len(chunks) - 1 and "usage" in chunk:
                time.sleep(step.usage_delay)
            write(sse_frame(chunk, step.named))
            self.wfile.flush()
            time.sleep(step.gap)
        if step.done:
            write(b"data: [DONE]\n\n")
        if squeeze is not None:
            self.wfile.write(squeeze.flush())
        self.wfile.flush()
        return "complete"
