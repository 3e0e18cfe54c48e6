"""The forwarded body is the client's JSON, re-encoded compactly with orjson
(passthru/calls.py encode): values arrive unchanged, including what orjson
cannot write itself, and NaN/Infinity are refused as not JSON."""
from __future__ import annotations

import json

import httpx
import pytest

from tests.conftest import MARINA_KEY
from tests.in_process import InProcessMarina


def _post(marina: InProcessMarina, content: bytes, stream: bool = False) -> httpx.Response:
    return marina.http.post(
        "/v1/chat/completions",
        content=content,
        headers={"authorization": f"Bearer {MARINA_KEY}", "content-type": "application/json"},
        timeout=10,
    )


@pytest.mark.parametrize("stream", [False, True])
def test_values_reach_the_provider_unchanged(marina, upstream, stream):
    body = {
        "model": "openrouter/openai/gpt-5.2",
        "messages": [{"role": "user", "content": "é ✓ \u2028 \\ \"q\" \x01 𝄞"}],
        "temperature": 1e-07,
        "seed": 123456789012345678901234567890,  # beyond 64 bits: json.dumps writes it
        "metadata": {"nested": [1, 2.5, None, True, {"k": []}]},
        "stream": stream,
    }
    response = _post(marina, json.dumps(body).encode())
    assert response.status_code == 200
    sent = upstream.requests[0].body
    assert sent["model"] == "openai/gpt-5.2"
    for key in ("messages", "temperature", "seed", "metadata"):
        assert sent[key] == body[key]


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
def test_nan_and_infinity_are_not_json(marina, upstream, constant):
    raw = b'{"model": "openrouter/openai/gpt-5.2", "messages": [{"role": "user", "content": "x"}], "temperature": ' + constant + b"}"
    response = _post(marina, raw)
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"
    assert upstream.requests == []
