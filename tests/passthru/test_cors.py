"""CORS for browser clients (passthru/cors.py): off by default; with
MARINA_CORS_ORIGINS the answers expose Marina's headers, and preflights are
answered without a key."""
from __future__ import annotations

import httpx

from tests.conftest import MARINA_KEY
from tests.in_process import InProcessMarina

ORIGIN = "https://agents.example"
BODY = {"model": "openrouter/openai/gpt-5.2", "messages": [{"role": "user", "content": "hi"}]}


def post(marina: InProcessMarina, **headers: str) -> httpx.Response:
    return marina.http.post(
        "/v1/chat/completions", json=BODY, headers={"authorization": f"Bearer {MARINA_KEY}", **headers}, timeout=30
    )


def exposed(response: httpx.Response) -> set[str]:
    return {h.strip() for h in response.headers["access-control-expose-headers"].split(",")}


def test_off_by_default(marina, upstream):
    response = post(marina, origin=ORIGIN)
    assert response.status_code == 200
    assert not any(h.startswith("access-control-") for h in response.headers)
    assert marina.http.options("/v1/chat/completions", headers={"origin": ORIGIN}).status_code == 405


def test_an_allowed_origin_sees_marinas_headers(marina, marina_config, upstream):
    marina_config.MARINA_CORS_ORIGINS = [ORIGIN]
    response = post(marina, origin=ORIGIN)
    assert response.headers["access-control-allow-origin"] == ORIGIN
    assert response.headers["vary"] == "Origin"
    assert {"x-request-id", "x-marina-upstream-model", "x-marina-cost-usd", "x-marina-cache-read-tokens",
            "x-marina-cache-write-tokens", "retry-after"} <= exposed(response)
    # An error answer too (a browser must be able to read why).
    refused = post(marina, origin=ORIGIN, authorization="Bearer wrong")
    assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == ORIGIN
    other = post(marina, origin="https://elsewhere.example")
    assert "access-control-allow-origin" not in other.headers


def test_wildcard_and_models(marina, marina_config, upstream):
    marina_config.MARINA_CORS_ORIGINS = ["*"]
    response = marina.http.get("/v1/models", headers={"authorization": f"Bearer {MARINA_KEY}", "origin": ORIGIN})
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == "*" and "x-request-id" in exposed(response)


def test_preflight_needs_no_key(marina, marina_config, upstream):
    marina_config.MARINA_CORS_ORIGINS = [ORIGIN]
    response = marina.http.options(
        "/v1/chat/completions",
        headers={"origin": ORIGIN, "access-control-request-method": "POST",
                 "access-control-request-headers": "authorization, content-type, x-stainless-os"},
    )
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in response.headers["access-control-allow-methods"]
    assert response.headers["access-control-allow-headers"] == "authorization, content-type, x-stainless-os"
    assert upstream.requests == []


def test_the_openai_sdk_still_works_with_cors_on(marina, marina_config, upstream):
    marina_config.MARINA_CORS_ORIGINS = ["*"]
    client = marina.openai(MARINA_KEY, default_headers={"origin": ORIGIN})
    raw = client.chat.completions.with_raw_response.create(**BODY)
    assert raw.headers["access-control-allow-origin"] == "*"
