"""A load generator on the real `openai` SDK, and the priced upstream it talks to.

Request i asks for `load #<i>`; the upstream reports `usage.cost` as a
function of i only (`cost_nanousd(i)`), so the client knows the exact cost of
everything it sent without reading Marina: the ledger's sums can be compared
with an independent figure. Used by the e2e tests and by bench/soak.py.
"""
from __future__ import annotations

import asyncio
import itertools
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import httpx
import openai

from tests.upstream import Reply, Sse, Step, completion, tool_call

MODEL = "openrouter/openai/gpt-5.2"
KINDS = ("plain", "stream", "tools")
POOL = 16  # connections per client (see run_load)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_order_details",
            "description": "Look an order up by id.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
        },
    }
]
_INDEX = re.compile(r"load #(\d+)")


# Costs are whole multiples of 10 nano-dollars: x-marina-cost-usd has 8
# decimals, so each header then states its call's cost exactly.
def cost_nanousd(i: int) -> int:
    """What request i costs, in nano-dollars: varied, never zero (1 µ$ to ~101 µ$)."""
    return 10 * (100 + (i * 7919) % 10_000)


def tiny_cost_nanousd(i: int) -> int:
    """A cheaper scheme (10 to 1000 nano-dollars) for runs that must stay under a cap."""
    return 10 * (1 + (i * 7919) % 100)


CAP_PHASE = 1_000_000  # cap tests: request indexes from here on cost a cent each
CENT_NANOUSD = 10_000_000


def cap_test_cost_nanousd(i: int) -> int:
    """Tiny costs below CAP_PHASE (a run that stays under a cap), a cent from there on."""
    return tiny_cost_nanousd(i) if i < CAP_PHASE else CENT_NANOUSD


def request_index(body: Any) -> int | None:
    try:
        match = _INDEX.search(str(body["messages"][-1]["content"]))
    except (KeyError, IndexError, TypeError):
        return None
    return int(match.group(1)) if match else None


def priced_handler(cost: Callable[[int], int] = cost_nanousd, *, delay: float = 0.0) -> Callable[[Any], Step | None]:
    """An upstream handler answering each kind of load request, with usage.cost = cost(i)."""

    def handle(body: Any) -> Step | None:
        i = request_index(body)
        if i is None:
            return None  # the upstream's default reply
        dollars = float(Decimal(cost(i)) / 10**9)
        if body.get("stream"):
            usage = {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37, "cost": dollars}
            return Sse(usage=usage, delay=delay)
        if body.get("tools"):
            calls = [tool_call("get_order_details", {"order_id": f"#{i}"}, call_id=f"call_{i}")]
            return Reply(json=completion(None, tool_calls=calls, cost=dollars), delay=delay)
        return Reply(json=completion(f"answer {i}", cost=dollars), delay=delay)

    return handle


@dataclass
class Outcome:
    """What the client saw for one request."""

    index: int
    kind: str
    server: str
    status: int | None = None  # None: no HTTP answer at all (connection refused or dropped)
    request_id: str = ""
    header_cost_nanousd: int | None = None  # x-marina-cost-usd, plain replies only
    complete: bool = False  # the whole answer arrived and said what the upstream said
    error: str = ""
    error_code: str = ""
    retry_after: str = ""  # an error's Retry-After header
    started: float = 0.0  # time.monotonic() when sent
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.complete


def _header_cost(value: str | None) -> int | None:
    return None if value is None else int(Decimal(value) * 10**9)


async def one_request(client: openai.AsyncOpenAI, server: str, i: int, kind: str, *, model: str = MODEL) -> Outcome:
    out = Outcome(index=i, kind=kind, server=server, started=time.monotonic())
    started = time.perf_counter()
    messages = [{"role": "system", "content": "You are a support agent."}, {"role": "user", "content": f"load #{i}"}]
    try:
        if kind == "stream":
            raw = await client.chat.completions.with_raw_response.create(model=model, messages=messages, stream=True)
            out.status, out.request_id = raw.status_code, raw.headers.get("x-request-id", "")
            stream = raw.parse()  # with_raw_response is the SDK's legacy wrapper: parse() is sync
            text = ""
            async for chunk in stream:
                if chunk.choices:
                    text += chunk.choices[0].delta.content or ""
            out.complete = text == "Hello there, streamed."
        else:
            extra: dict[str, Any] = {"tools": TOOLS, "tool_choice": "auto"} if kind == "tools" else {}
            raw = await client.chat.completions.with_raw_response.create(model=model, messages=messages, **extra)
            out.status, out.request_id = raw.status_code, raw.headers.get("x-request-id", "")
            out.header_cost_nanousd = _header_cost(raw.headers.get("x-marina-cost-usd"))
            reply = raw.parse()
            message = reply.choices[0].message
            if kind == "tools":
                out.complete = bool(message.tool_calls) and message.tool_calls[0].function.arguments == f'{{"order_id": "#{i}"}}'
            else:
                out.complete = message.content == f"answer {i}"
    except openai.APIStatusError as exc:
        out.status, out.error = exc.status_code, str(exc)[:300]
        out.request_id = exc.response.headers.get("x-request-id", "")
        out.retry_after = exc.response.headers.get("retry-after", "")
        body = exc.body if isinstance(exc.body, dict) else {}
        out.error_code = str(body.get("code") or (body.get("error") or {}).get("code") or "")
    except openai.APIError as exc:  # connection errors, and error events inside a stream
        out.error = f"{type(exc).__name__}: {exc}"[:300]
    out.seconds = time.perf_counter() - started
    return out


def client_for(base_url: str, api_key: str, *, concurrency: int, timeout: float = 60) -> openai.AsyncOpenAI:
    http = httpx.AsyncClient(
        limits=httpx.Limits(max_connections=concurrency + 8, max_keepalive_connections=concurrency + 8),
        timeout=timeout,
    )
    return openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key=api_key, max_retries=0, http_client=http)


async def run_load(
    base_urls: Sequence[str],
    api_key: str,
    *,
    concurrency: int,
    requests: int | None = None,
    seconds: float | None = None,
    kinds: Sequence[str] = KINDS,
    first_index: int = 0,
    timeout: float = 60,
    on_outcome: Callable[[Outcome], None] | None = None,
    stop: Callable[[], bool] | None = None,
    model: str = MODEL,
) -> list[Outcome]:
    """`concurrency` workers send requests until `requests` were sent or
    `seconds` passed (whichever is given) or `stop()` says so, spread
    round-robin over the servers and the kinds. Every request sent has an
    Outcome: nothing is dropped."""
    assert requests is not None or seconds is not None
    # httpx's pool costs CPU that grows with its size: 128 connections in one
    # pool cost the client ~4x more per request than 16. So each server gets
    # a few clients of up to POOL connections, and each worker keeps to one.
    shards = max(1, -(-concurrency // POOL))
    clients = [
        [client_for(url, api_key, concurrency=min(concurrency, POOL), timeout=timeout) for _ in range(shards)]
        for url in base_urls
    ]
    counter = itertools.count(first_index)
    stop_at = time.monotonic() + seconds if seconds is not None else None
    last = first_index + requests if requests is not None else None
    outcomes: list[Outcome] = []

    async def worker(w: int) -> None:
        while True:
            if (stop_at is not None and time.monotonic() >= stop_at) or (stop is not None and stop()):
                return
            i = next(counter)
            if last is not None and i >= last:
                return
            n = len(base_urls)
            client = clients[i % n][w % shards]
            out = await one_request(client, base_urls[i % n], i, kinds[(i // n) % len(kinds)], model=model)
            outcomes.append(out)
            if on_outcome is not None:
                on_outcome(out)

    try:
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
    finally:
        for per_server in clients:
            for client in per_server:
                await client.close()
    return sorted(outcomes, key=lambda o: o.index)


def summary(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    by_status: dict[str, int] = {}
    for o in outcomes:
        key = str(o.status) if o.status is not None else "no-answer"
        by_status[key] = by_status.get(key, 0) + 1
    times = sorted(o.seconds for o in outcomes)
    return {
        "sent": len(outcomes),
        "ok": sum(o.ok for o in outcomes),
        "by_status": by_status,
        "p50_ms": round(times[len(times) // 2] * 1000, 1) if times else None,
        "p99_ms": round(times[int(len(times) * 0.99)] * 1000, 1) if times else None,
        "errors": sorted({o.error for o in outcomes if o.error})[:5],
    }
