"""Usage no provider should send (issue 42 D4-D6), on every door, plain and
streamed: a negative, non-finite or out-of-range cost or token count is
recorded as unknown (a cost from the price table where the counts allow),
named on the span (`usage_rejected`) and counted in a metric. The call stays
answered 200, its trace and spend are written, and no total goes down."""
from __future__ import annotations

import math
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

from ledger.models import SpendDaily, Trace
from passthru.pricing import Usage, price
from tests.conftest import MARINA_KEY
from tests.passthru.doors.test_messages import USAGE as MESSAGES_USAGE
from tests.passthru.doors.test_messages import message, message_events
from tests.passthru.doors.test_responses import native_events, response_object
from tests.upstream import Reply, Sse, completion, sse_chunks

# name -> (what the provider's usage gets, the field Marina must not believe)
BAD: dict[str, tuple[dict[str, Any], str]] = {
    "negative cost": ({"cost": -5}, "cost"),
    "NaN cost": ({"cost": math.nan}, "cost"),
    "infinite cost": ({"cost": math.inf}, "cost"),  # 1e400 on the wire reads as inf
    "a trillion-dollar cost": ({"cost": 1e12}, "cost"),
    "10^30 output tokens": ({"OUTPUT": 10**30}, "completion_tokens"),
    "negative output tokens": ({"OUTPUT": -7}, "completion_tokens"),
}

# Each door: the model, its path, its usage's output-token name, its good usage.
DOORS: dict[str, tuple[str, str, str, dict[str, Any]]] = {
    "chat": ("openrouter/openai/gpt-5.2", "/chat/completions", "completion_tokens",
             {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}),
    "responses": ("openai/gpt-5.2", "/responses", "output_tokens",
                  {"input_tokens": 200, "output_tokens": 30, "total_tokens": 230}),
    "messages": ("anthropic/claude-sonnet-4-5", "/messages", "output_tokens", dict(MESSAGES_USAGE)),
}


def bad_usage(door: str, bad: dict[str, Any]) -> dict[str, Any]:
    output = DOORS[door][2]
    usage = dict(DOORS[door][3])
    for name, value in bad.items():
        usage[output if name == "OUTPUT" else name] = value
    return usage


def script(upstream, door: str, usage: dict[str, Any], stream: bool) -> None:
    if door == "chat":
        if stream:
            upstream.script(Sse(chunks=sse_chunks(), usage=usage))
        else:
            reply = completion()
            reply["usage"] = usage
            upstream.script(Reply(json=reply))
    elif door == "responses":
        if stream:
            events = native_events()
            events[-1]["response"]["usage"] = usage
            upstream.script(Sse(chunks=events, usage=None, named=True, done=False))
        else:
            upstream.script(Reply(json=response_object(usage=usage)))
    else:
        if stream:
            events = message_events()
            events[-2]["usage"] = {k: v for k, v in usage.items() if k in ("output_tokens", "cost")}
            upstream.script(Sse(chunks=events, usage=None, named=True, done=False))
        else:
            upstream.script(Reply(json=message(usage=usage)))


def request(door: str, stream: bool) -> dict[str, Any]:
    model = DOORS[door][0]
    if door == "chat":
        body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
        if stream:
            body["stream_options"] = {"include_usage": True}
    elif door == "responses":
        body = {"model": model, "input": "hi"}
    else:
        body = {"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    return {**body, "stream": stream}


def rejected_count(provider: str, field: str) -> float:
    """The counter, once the ledger writer has counted every trace it committed: it counts just
    after the commit that makes the trace readable here, on its own thread, which works in order."""
    from kernel import dbwriter

    dbwriter.submit(lambda: None).result()
    return REGISTRY.get_sample_value("marina_usage_rejected_total", {"provider": provider, "field": field}) or 0.0


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("door", list(DOORS))
@pytest.mark.parametrize("case", list(BAD))
def test_bad_usage_is_recorded_as_unknown_and_never_negative(case, door, stream, marina, upstream, speakers):
    bad, field = BAD[case]
    usage = bad_usage(door, bad)
    provider = DOORS[door][0].split("/")[0]
    script(upstream, door, usage, stream)
    before = rejected_count(provider, field)
    with marina.client(timeout=30) as client:
        reply = client.post(f"/v1{DOORS[door][1]}", json=request(door, stream), headers={"authorization": f"Bearer {MARINA_KEY}"})
    assert reply.status_code == 200, reply.text
    if stream and door == "chat":
        assert reply.text.rstrip().endswith("data: [DONE]")  # not cut mid-way
    trace = Trace.objects.get(request_id=reply.headers["x-request-id"])
    assert (trace.status, trace.http_status) == ("ok", 200)
    span = trace.spans.get(provider=provider)
    assert span.detail["usage_rejected"] == [field]
    for name in ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens"):
        assert 0 <= getattr(span, name) <= 10**10
    spend = SpendDaily.objects.get()
    assert spend.calls == 1 and spend.cost_nanousd >= 0
    if field == "cost":
        # The counts are good: the call is priced from the list price, as if no cost were reported.
        expected = Usage(**{k: v for k, v in _good_counts(door).items()})
        price(expected, provider=provider, upstream_model=span.upstream_model, reported=None, cache_writes=door == "messages")
        assert expected.cost_nanousd is not None and expected.cost_nanousd > 0
        assert (span.cost_nanousd, span.cost_source) == (expected.cost_nanousd, "price_table")
        assert spend.cost_nanousd == trace.cost_nanousd == expected.cost_nanousd
    else:
        # An output count unknown: the call is unknown in price too (a lower bound), never a made-up figure.
        assert span.completion_tokens == 0
        assert (span.cost_nanousd, span.cost_source) == (None, "none")
        assert spend.unpriced_calls == 1 and spend.cost_nanousd == 0
    assert rejected_count(provider, field) == before + 1


def _good_counts(door: str) -> dict[str, int]:
    """The usage Marina reads from DOORS' good figures, as Usage fields."""
    usage = DOORS[door][3]
    if door == "chat":
        return {"prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"]}
    if door == "responses":
        return {"prompt_tokens": usage["input_tokens"], "completion_tokens": usage["output_tokens"]}
    read, written = usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]
    return {"prompt_tokens": usage["input_tokens"] + read + written, "completion_tokens": usage["output_tokens"],
            "cached_tokens": read, "cache_write_tokens": written}


def test_a_cost_of_1e400_on_the_wire_is_recorded_at_the_list_price(marina, upstream):
    """The literal the probe sent (json reads it as inf), on a plain chat call."""
    reply = completion()
    text = httpx.Response(200, json=reply).text.replace('"usage": {', '"usage": {"cost": 1e400, ').replace('"usage":{', '"usage":{"cost":1e400,')
    assert "1e400" in text
    upstream.script(Reply(raw=text.encode()))
    with marina.client(timeout=30) as client:
        answer = client.post("/v1/chat/completions", json=request("chat", False), headers={"authorization": f"Bearer {MARINA_KEY}"})
    assert answer.status_code == 200, answer.text
    span = Trace.objects.get(request_id=answer.headers["x-request-id"]).spans.get(provider="openrouter")
    assert span.detail["usage_rejected"] == ["cost"] and span.cost_source == "price_table" and span.cost_nanousd > 0


@pytest.mark.parametrize("door", list(DOORS))
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_max_tokens_of_1e29_is_refused_with_400(door, stream, marina, upstream, speakers, settings):
    """Issue 42 D3: 10^29 reached the cap's estimate and its 429 crashed formatting it (500)."""
    settings.MARINA_DAILY_SPEND_CAP_USD = 10
    body = request(door, stream)
    name = "max_output_tokens" if door == "responses" else "max_tokens"
    body[name] = 10**29
    with marina.client(timeout=30) as client:
        reply = client.post(f"/v1{DOORS[door][1]}", json=body, headers={"authorization": f"Bearer {MARINA_KEY}"})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    if door == "messages":  # Anthropic's envelope on its door
        assert error["type"] == "invalid_request_error" and f"'{name}' must be at most 2147483647" in error["message"]
    else:
        assert error["param"] == name and error["message"] == f"'{name}' must be at most 2147483647."
    assert not upstream.requests
