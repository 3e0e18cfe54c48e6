"""Streams are never relayed compressed (issue 10, item 5).

Marina used to ask every provider for gzip and pass a stream's bytes on as
they came: the client got gzip without a Content-Encoding, and the usage chunk
was never seen, so the call went unmetered. Now a stream is asked for without
compression, and one compressed anyway is decoded; either way the client gets
the events and the call is metered."""
from __future__ import annotations

import json

import httpx
import pytest

from ledger.models import Trace
from tests.conftest import MARINA_KEY
from tests.in_process import InProcessMarina
from tests.upstream import Sse

USAGE = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17, "cost": 0.0021}


def _stream(marina: InProcessMarina) -> tuple[httpx.Response, list[str]]:
    body = {"model": "openrouter/openai/gpt-5.2", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    headers = {"authorization": f"Bearer {MARINA_KEY}"}
    with marina.http.stream("POST", "/v1/chat/completions", json=body, headers=headers, timeout=30) as response:
        raw = response.read()
    events = [e[len("data: ") :] for e in raw.decode().split("\n\n") if e.startswith("data: ")]
    return response, events


@pytest.mark.parametrize("gzip", ["if-asked", "always"])
def test_a_stream_reaches_the_client_decoded_and_is_metered(marina, upstream, gzip):
    upstream.script(Sse(usage=USAGE, gzip=gzip))
    response, events = _stream(marina)
    assert response.status_code == 200 and "content-encoding" not in response.headers
    assert events[-1] == "[DONE]"
    text = "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1])
    assert text == "Hello there, streamed."
    assert upstream.requests[0].headers["accept-encoding"] == "identity"
    trace = Trace.objects.get(request_id=response.headers["x-request-id"])
    assert (trace.status, trace.prompt_tokens, trace.completion_tokens, trace.cost_nanousd) == ("ok", 12, 5, 2_100_000)
