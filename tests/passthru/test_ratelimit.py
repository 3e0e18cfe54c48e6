"""The rate limit through Marina in-process (passthru/ratelimit.py): per key name,
per IP without a key, X-Forwarded-For only when trusted, 429 with Retry-After,
off by default. Across processes and hosts: tests/e2e/test_rate_limit_e2e.py."""
from __future__ import annotations

import httpx
import openai
import pytest

from ledger.models import Trace
from passthru.models import RateBucket
from tests.conftest import MARINA_KEY
from tests.in_process import InProcessMarina
from tests.upstream import Reply, completion

MODEL = "openrouter/openai/gpt-5.2"
HELLO = [{"role": "user", "content": "hello"}]
OTHER_KEY = "sk-marina-other-key-5555555555"


@pytest.fixture
def limited(marina_config):
    """3 requests, then (practically) no refill."""
    marina_config.MODEL_API_KEYS = f"{MARINA_KEY}:tester,{OTHER_KEY}:other"
    marina_config.MARINA_RATE_LIMIT_RPS = 0.001
    marina_config.MARINA_RATE_LIMIT_BURST = 3
    marina_config.MARINA_TRUSTED_PROXIES = ""
    return marina_config


def post(marina: InProcessMarina, key: str | None = MARINA_KEY, **headers: str) -> httpx.Response:
    if key:
        headers["authorization"] = f"Bearer {key}"
    return marina.http.post("/v1/chat/completions", json={"model": MODEL, "messages": HELLO}, headers=headers, timeout=30)


def test_off_by_default(marina, marina_config, upstream):
    assert marina_config.MARINA_RATE_LIMIT_RPS == 0
    assert all(post(marina).status_code == 200 for _ in range(8))
    assert not RateBucket.objects.exists()


def test_burst_then_429_with_retry_after(marina, limited, upstream):
    assert [post(marina).status_code for _ in range(3)] == [200, 200, 200]
    refused = post(marina)
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limit_exceeded")
    assert "MARINA_RATE_LIMIT_RPS" in error["message"]
    # One token every 1000 s: the next comes in ~1000 s.
    assert 990 <= int(refused.headers["retry-after"]) <= 1001
    assert 990_000 <= int(refused.headers["retry-after-ms"]) <= 1_000_001
    assert len(upstream.requests) == 3, "a refused request never reaches the provider"
    trace = Trace.objects.get(request_id=refused.headers["x-request-id"])
    assert (trace.http_status, trace.error_kind, trace.key_name) == (429, "rate_limit_exceeded", "tester")
    bucket = RateBucket.objects.get()
    assert bucket.client == "key:tester" and 0 <= bucket.tokens < 1


def test_each_key_has_its_own_bucket(marina, limited, upstream):
    assert [post(marina).status_code for _ in range(4)] == [200, 200, 200, 429]
    assert [post(marina, OTHER_KEY).status_code for _ in range(4)] == [200, 200, 200, 429]


def test_unauthenticated_requests_are_not_counted(marina, limited, upstream):
    assert post(marina, "wrong").status_code == 401
    assert [post(marina).status_code for _ in range(4)] == [200, 200, 200, 429]


def test_open_mode_limits_per_ip_and_trusts_forwarded_for_only_when_told(marina, limited, upstream):
    limited.MODEL_API_KEYS = ""
    limited.MARINA_OPEN_API = True
    # Not trusted: X-Forwarded-For is ignored, every request is 127.0.0.1's.
    codes = [post(marina, None, **{"x-forwarded-for": f"10.0.0.{i}"}).status_code for i in range(4)]
    assert codes == [200, 200, 200, 429]
    assert list(RateBucket.objects.values_list("client", flat=True)) == ["ip:127.0.0.1"]
    limited.MARINA_TRUSTED_PROXIES = "1"  # one proxy in front: the client is the hop it appended
    assert post(marina, None, **{"x-forwarded-for": "10.0.0.9, 172.16.0.1"}).status_code == 200
    assert post(marina, None, **{"x-real-ip": "10.0.0.8"}).status_code == 200
    assert {"ip:172.16.0.1", "ip:10.0.0.8"} <= set(RateBucket.objects.values_list("client", flat=True))
    # spoofed first hops are the client's own writing: they all share the proxy-seen client's bucket
    codes = [post(marina, None, **{"x-forwarded-for": f"6.6.6.{i}, 172.16.0.1"}).status_code for i in range(3)]
    assert codes == [200, 200, 429]
    assert not RateBucket.objects.filter(client__startswith="ip:6.6.6.").exists()


def test_the_openai_sdk_waits_as_told_and_gets_through(marina_url, limited, upstream):
    """One token, one a second: the SDK's own retry honours retry-after-ms (over a socket: the
    SDK's own HTTP stack and its retries are the subject)."""
    limited.MARINA_RATE_LIMIT_RPS = 1
    limited.MARINA_RATE_LIMIT_BURST = 1
    client = openai.OpenAI(base_url=f"{marina_url}/v1", api_key=MARINA_KEY, max_retries=3)
    upstream.script(Reply(json=completion("one")), Reply(json=completion("two")))
    first = client.chat.completions.create(model=MODEL, messages=HELLO)
    second = client.chat.completions.with_raw_response.create(model=MODEL, messages=HELLO)
    assert first.choices[0].message.content == "one"
    assert second.parse().choices[0].message.content == "two"
    refused = Trace.objects.filter(http_status=429).count()
    assert refused >= 1, "the second call was refused at least once before it got through"
    assert Trace.objects.filter(http_status=200).count() == 2
