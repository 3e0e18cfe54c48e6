"""LiteLLM, called exactly the way τ²-bench calls it, through a live Marina.

τ² names models `openai/<marina model id>` with `api_base` pointing at
Marina, passes `reasoning_effort` through `extra_body`, and turns
`drop_params` on: the field must still reach the provider unchanged."""
from __future__ import annotations

import os

# LiteLLM must stay offline: its price map ships inside the package. Set
# before anything imports litellm (τ² does the same).
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

from ledger.models import SpendDaily, Trace
from tests.conftest import MARINA_KEY, PROVIDER_KEY
from tests.upstream import Reply, Sse, completion

MESSAGES = [{"role": "system", "content": "You are an airline agent."}, {"role": "user", "content": "Cancel my trip."}]


def tau2_completion(marina_url: str, **kwargs):
    import litellm  # here, not at the top: importing litellm costs seconds of every worker's collection

    litellm.drop_params = True
    return litellm.completion(
        model="openai/openrouter/openai/gpt-5.2",
        messages=MESSAGES,
        api_base=f"{marina_url}/v1",
        api_key=MARINA_KEY,
        extra_body={"reasoning_effort": "high"},
        num_retries=0,
        **kwargs,
    )


def test_litellm_as_tau2_calls_it_reaches_the_provider_unchanged(marina_url, upstream):
    upstream.script(Reply(json=completion("Done.", prompt_tokens=200, completion_tokens=9, cost=0.00042)))

    response = tau2_completion(marina_url)

    assert response.choices[0].message.content == "Done."
    assert response.usage.prompt_tokens == 200
    sent = upstream.requests[0]
    assert sent.body["reasoning_effort"] == "high"  # drop_params did not drop it: extra_body is sent as is
    assert sent.body["model"] == "openai/gpt-5.2"
    assert sent.body["messages"] == MESSAGES
    assert sent.headers["authorization"] == f"Bearer {PROVIDER_KEY}"
    # LiteLLM hands the response headers back, prefixed `llm_provider-`.
    headers = response._hidden_params["additional_headers"]
    assert headers["llm_provider-x-marina-upstream-model"] == "openrouter/openai/gpt-5.2"
    assert headers["llm_provider-x-marina-cost-usd"] == "0.00042000"
    request_id = headers["llm_provider-x-request-id"]
    trace = Trace.objects.get(request_id=request_id)
    assert (trace.status, trace.key_name, trace.cost_nanousd) == ("ok", "tester", 420_000)
    assert SpendDaily.objects.get().calls == 1


def test_litellm_streamed_as_tau2_might_stream(marina_url, upstream):
    upstream.script(Sse(usage={"prompt_tokens": 50, "completion_tokens": 6, "total_tokens": 56, "cost": 0.0001}))

    chunks = list(tau2_completion(marina_url, stream=True))

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello there, streamed."
    assert upstream.requests[0].body["reasoning_effort"] == "high"
    span = Trace.objects.get().spans.get()
    assert (span.prompt_tokens, span.completion_tokens, span.cost_nanousd) == (50, 6, 100_000)


def test_the_kits_retry_policy_stays_with_litellm(marina_url, upstream):
    """repro_tau2 hands τ² a retry policy in its llm args; LiteLLM keeps it and sends the body as before."""
    from repro.plan import RETRY_POLICY

    upstream.script(Reply(json=completion("Done.")))

    tau2_completion(marina_url, retry_policy=RETRY_POLICY)

    (sent,) = upstream.requests
    assert "retry_policy" not in sent.body and "RateLimitErrorRetries" not in sent.raw.decode()
    assert sent.body["reasoning_effort"] == "high"
