"""The doors share chat's rate limit and daily cap, and a stream cut upstream ends in the door's own error event."""
from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

import openai
import pytest

from ledger.models import Trace
from tests.conftest import MARINA_KEY
from tests.in_process import InProcessMarina
from tests.passthru.doors.test_messages import message, message_events
from tests.passthru.doors.test_responses import response_object
from tests.upstream import Reply, Sse

if TYPE_CHECKING:
    # Imported in each case that uses it: at the top it would cost a second of every worker's collection.
    import anthropic

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def clients(marina: InProcessMarina) -> tuple[openai.OpenAI, anthropic.Anthropic]:

    return (
        marina.openai(MARINA_KEY),
        marina.anthropic(api_key=MARINA_KEY, max_retries=0),
    )


def test_one_rate_limit_bucket_across_the_doors(clients, upstream, speakers):
    import anthropic

    speakers.MARINA_RATE_LIMIT_RPS = 0.001
    speakers.MARINA_RATE_LIMIT_BURST = 3
    oa, claude = clients
    upstream.script(Reply(json={"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.5]}], "model": "m", "usage": {"prompt_tokens": 1, "total_tokens": 1}}),
                    Reply(json=response_object()), Reply(json=message()))
    oa.embeddings.create(model="openai/text-embedding-3-small", input="x")
    oa.responses.create(model="openrouter/openai/gpt-5.2", input="x")
    claude.messages.create(model="anthropic/claude-sonnet-4-5", max_tokens=8, messages=HI)
    with pytest.raises(anthropic.RateLimitError) as refused:
        claude.messages.create(model="anthropic/claude-sonnet-4-5", max_tokens=8, messages=HI)
    assert refused.value.body["error"]["type"] == "rate_limit_error"
    assert int(refused.value.response.headers["retry-after"]) > 900
    with pytest.raises(openai.RateLimitError) as also:
        oa.responses.create(model="openrouter/openai/gpt-5.2", input="x")
    assert also.value.code == "rate_limit_exceeded"
    assert len(upstream.requests) == 3


def test_the_daily_cap_holds_on_the_doors(clients, upstream, speakers):
    import anthropic

    speakers.MARINA_DAILY_SPEND_CAP_USD = Decimal("1")
    oa, claude = clients
    upstream.script(Reply(json=response_object(usage={"input_tokens": 10, "output_tokens": 1, "total_tokens": 11, "cost": 1.0})))
    oa.responses.create(model="openrouter/openai/gpt-5.2", input="x")  # spends the whole day's dollar
    with pytest.raises(anthropic.RateLimitError) as refused:
        claude.messages.create(model="anthropic/claude-sonnet-4-5", max_tokens=8, messages=HI)
    assert "spent today" in refused.value.body["error"]["message"]
    with pytest.raises(openai.RateLimitError) as also:
        oa.responses.create(model="openrouter/openai/gpt-5.2", input="x")
    assert also.value.code == "spend_cap_reached"
    assert len(upstream.requests) == 1


def test_the_caps_estimate_reads_max_output_tokens(clients, upstream, speakers):
    # openai/gpt-5.2 on OpenRouter: $14 per million output tokens. Held at the
    # default 1024 output tokens ($0.014) the call does not fit under $0.005;
    # held at the 10 the request allows, it does.
    speakers.MARINA_DAILY_SPEND_CAP_USD = Decimal("0.005")
    oa, _ = clients
    with pytest.raises(openai.RateLimitError):
        oa.responses.create(model="openrouter/openai/gpt-5.2", input="x")
    upstream.script(Reply(json=response_object()))
    assert oa.responses.create(model="openrouter/openai/gpt-5.2", input="x", max_output_tokens=10).output_text
    assert len(upstream.requests) == 1


def test_a_stream_cut_upstream_ends_in_anthropics_error_event(clients, upstream, speakers):
    import anthropic

    _, claude = clients
    upstream.script(Sse(chunks=message_events(), usage=None, named=True, done=False, reset_after=4))
    with pytest.raises(anthropic.APIStatusError):
        with claude.messages.stream(model="anthropic/claude-sonnet-4-5", max_tokens=8, messages=HI) as stream:
            for _ in stream:
                pass
    trace = Trace.objects.get()
    assert (trace.status, trace.error_kind) == ("error", "reset")
    span = trace.spans.get()
    assert span.status == "error" and span.prompt_tokens == 7100  # metered from message_start, before the cut
