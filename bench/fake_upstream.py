"""A fast fake OpenAI-compatible upstream for the benchmarks.

Raw asyncio (uvloop when installed) with a minimal HTTP/1.1 keep-alive parser,
so that it is never the bottleneck: it answers every
`POST .../chat/completions` with one canned completion, or, when the body asks
for `"stream": true`, with a canned SSE stream (a role chunk, content chunks, a
finish chunk, a usage chunk and `[DONE]`) sent one event per write, `gap_ms`
apart, as a model streams tokens. `POST .../responses`, `.../messages` and
`.../embeddings` get their own canned answers (bench/door_bodies.py): a
response object or the Responses events, an Anthropic message or its events,
two embeddings. `GET .../models` lists the one model. Anything else is 404.

A slow stream, as a reasoning model sends it (bench/slow_streams.py): with
`--first-token-ms F` nothing at all is sent for F ms (not even the status
line), then the role chunk, then `--chunks N` content chunks `gap_ms` apart,
the finish, usage and `[DONE]` right after the last: F + N·gap in all.

Not the scripted test upstream (tests/upstream.py): that one is a threaded
stdlib server, exact and flexible, and far too slow to load-test a gateway.

    .venv/bin/python bench/fake_upstream.py --port 4010 [--gap-ms 1]
    .venv/bin/python bench/fake_upstream.py --port 4010 --first-token-ms 10000 --chunks 5 --gap-ms 2000
"""
from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import door_bodies

STREAM_RE = re.compile(rb'"stream"\s*:\s*true')
CONTENT_CHUNKS = 16
PROMPT_TOKENS = 4800  # about what the τ²-sized body is, in tokens
COMPLETION_TOKENS = 48


def completion_body(model: str = "gpt-4.1-mini") -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "call_bench",
                                "type": "function",
                                "function": {"name": "get_reservation_details", "arguments": '{"reservation_id":"4WQ150"}'},
                            }
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {
                "prompt_tokens": PROMPT_TOKENS,
                "completion_tokens": COMPLETION_TOKENS,
                "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
                "prompt_tokens_details": {"cached_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0},
            },
        }
    ).encode()


def stream_events(model: str = "gpt-4.1-mini", content_chunks: int = CONTENT_CHUNKS) -> list[bytes]:
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    words = "I have found your reservation 4WQ150 from JFK to SEA on May 20 in economy, with two passengers."
    per = max(1, len(words) // content_chunks)
    for i in range(content_chunks):
        piece = words[i * per : (i + 1) * per] if i < content_chunks - 1 else words[i * per :]
        chunks.append({**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    chunks.append(
        {
            **base,
            "choices": [],
            "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS, "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS},
        }
    )
    events = [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks]
    events.append(b"data: [DONE]\n\n")
    return events


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Canned:
    def __init__(self, content_chunks: int = CONTENT_CHUNKS) -> None:
        body = completion_body()
        self.plain = (
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
        )
        self.stream_head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        self.stream_events = [_chunked(e) for e in stream_events(content_chunks=content_chunks)]
        self.stream_end = b"0\r\n\r\n"
        models = json.dumps({"object": "list", "data": [{"id": "gpt-4.1-mini", "object": "model", "created": 0, "owned_by": "bench"}]}).encode()
        self.models = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(models), models)
        self.doors = {
            b"/responses": (self._json(door_bodies.responses_plain()), [_chunked(e) for e in door_bodies.responses_events(content_chunks)]),
            b"/messages": (self._json(door_bodies.messages_plain()), [_chunked(e) for e in door_bodies.messages_events(content_chunks)]),
            b"/embeddings": (self._json(door_bodies.embeddings_plain()), []),
        }
        self.not_found = b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


    @staticmethod
    def _json(body: bytes) -> bytes:
        return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)


class Upstream(asyncio.Protocol):
    canned: Canned
    gap: float = 0.001
    first_token: float = 0.0  # seconds of silence before a stream's first byte (0: none)
    served = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buffer = b""
        self.busy: asyncio.Task[None] | None = None  # a stream being written
        self.pending: list[tuple[bytes, bytes, bytes]] = []

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end]
            length = 0
            lowered = head.lower()
            at = lowered.find(b"\r\ncontent-length:")
            if at >= 0:
                stop = lowered.find(b"\r\n", at + 2)
                length = int(lowered[at + 17 : stop if stop >= 0 else None])
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            method, _, rest = head.partition(b" ")
            path = rest.partition(b" ")[0]
            self._answer(method, path, body)

    def _answer(self, method: bytes, path: bytes, body: bytes) -> None:
        if self.busy is not None:  # pipelined behind a stream: answer in order
            self.pending.append((method, path, body))
            return
        Upstream.served += 1
        if method == b"POST" and path.endswith(b"/chat/completions"):
            if STREAM_RE.search(body):
                self.busy = asyncio.get_running_loop().create_task(self._stream())
            else:
                self.transport.write(self.canned.plain)
        elif method == b"POST" and (door := self.canned.doors.get(path[path.rfind(b"/") :])) is not None:
            plain, events = door
            if events and STREAM_RE.search(body):
                self.busy = asyncio.get_running_loop().create_task(self._stream(events, chat=False))
            else:
                self.transport.write(plain)
        elif method == b"GET" and path.endswith(b"/models"):
            self.transport.write(self.canned.models)
        else:
            self.transport.write(self.canned.not_found)

    async def _stream(self, events: list[bytes] | None = None, chat: bool = True) -> None:
        write = self.transport.write
        events = events or self.canned.stream_events
        if self.first_token and chat:  # slow streams are chat streams (bench/slow_streams.py)
            # A slow stream: silence, the role chunk, the content chunks gap
            # apart, and the end (finish, usage, [DONE]) with the last one.
            await asyncio.sleep(self.first_token)
            events = events[:-4] + [b"".join(events[-4:])]
        if not self.transport.is_closing():
            write(self.canned.stream_head)
        for i, event in enumerate(events):
            if self.transport.is_closing():
                break
            write(event)
            if self.gap and (not self.first_token or i < len(events) - 1):
                await asyncio.sleep(self.gap)
        if not self.transport.is_closing():
            write(self.canned.stream_end)
        self.busy = None
        while self.pending and self.busy is None:
            self._answer(*self.pending.pop(0))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.busy is not None:
            self.busy.cancel()


async def serve(host: str, port: int, gap_ms: float, first_token_ms: float = 0.0, chunks: int = CONTENT_CHUNKS) -> None:
    Upstream.canned = Canned(chunks)
    Upstream.gap = gap_ms / 1000
    Upstream.first_token = first_token_ms / 1000
    server = await asyncio.get_running_loop().create_server(Upstream, host, port, backlog=4096)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=4010)
    parser.add_argument("--gap-ms", type=float, default=1.0, help="pause between SSE events (0: none)")
    parser.add_argument("--first-token-ms", type=float, default=0.0, help="silence before a stream's first byte (0: none)")
    parser.add_argument("--chunks", type=int, default=CONTENT_CHUNKS, help=f"content chunks per stream (default {CONTENT_CHUNKS})")
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(args.host, args.port, args.gap_ms, args.first_token_ms, args.chunks))


if __name__ == "__main__":
    main()
