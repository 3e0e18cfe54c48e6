"""What each failure of the HTTP layer becomes, in-process: Marina's ASGI
application called through httpx's ASGITransport (no socket, no uvicorn), its
upstream calls answered by an `httpx.MockTransport` injected through
passthru/upstream.py's transport seam (`use_transport`). The faults here are
the ones a real server cannot stage on demand: a connect error that clears on
the retry, a pool wait that runs out, a body that does not decode. Resets,
timeouts and dead ports against the real scripted upstream are
tests/passthru/test_errors.py's."""
from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from ledger.models import Trace
from passthru import upstream as upstream_client
from tests.conftest import MARINA_KEY, PROVIDER_KEY
from tests.upstream import completion

MODEL = "openrouter/openai/gpt-5.2"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}]}
Handler = Callable[[httpx.Request], httpx.Response]


@pytest.fixture
def provider(transactional_db, marina_config) -> Iterator[Callable[[Handler], list[httpx.Request]]]:
    """Install a handler as every provider; returns the requests it was sent. Transactional: the
    ledger writer records traces from its own thread and connection."""
    from passthru import spendcap

    spendcap.submit(spendcap.forget).result()  # as marina_url does: no lease from the case before
    sent: list[httpx.Request] = []

    def install(handler: Handler) -> list[httpx.Request]:
        def recording(request: httpx.Request) -> httpx.Response:
            sent.append(request)
            return handler(request)

        upstream_client.use_transport(httpx.MockTransport(recording))
        return sent

    yield install
    upstream_client.use_transport(None)


def call(body: dict[str, Any] = BODY) -> httpx.Response:
    """POST /v1/chat/completions to the whole ASGI application (the key checked at intake included)."""
    from marina.asgi import application

    async def send() -> httpx.Response:
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as marina:
            return await marina.post("/v1/chat/completions", json=body, headers={"authorization": f"Bearer {MARINA_KEY}"})

    return asyncio.run(send())


def traced(response: httpx.Response) -> Trace:
    from kernel import dbwriter

    dbwriter.submit(lambda: None).result()  # the writer thread works in order: the call's trace is behind this
    return Trace.objects.get(request_id=response.headers["x-request-id"])


def test_a_connect_error_is_retried_once_and_the_second_try_serves(provider):
    def handler(request: httpx.Request) -> httpx.Response:
        if len(sent) == 1:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, json=completion("second try"))

    sent = provider(handler)
    response = call()
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "second try"
    assert len(sent) == 2  # the request never left the first time: safe to send again
    # The provider got its own key and the caller's request id, never the caller's key.
    assert {r.headers["authorization"] for r in sent} == {f"Bearer {PROVIDER_KEY}"}
    assert {r.headers["x-request-id"] for r in sent} == {response.headers["x-request-id"]}
    assert json.loads(sent[1].content)["messages"] == BODY["messages"]
    assert traced(response).status == "ok"


@pytest.mark.parametrize(
    "fault, status, kind, tries, said",
    [
        (httpx.ConnectError, 502, "connect", 2, "Could not connect to provider 'openrouter'."),
        (httpx.RemoteProtocolError, 502, "reset", 1, "closed the connection (RemoteProtocolError)"),
        (httpx.ReadError, 502, "reset", 1, "closed the connection (ReadError)"),
        (httpx.ReadTimeout, 504, "timeout", 1, "(MARINA_UPSTREAM_TIMEOUT="),
        (httpx.ConnectTimeout, 504, "timeout", 1, "Could not connect to provider 'openrouter' within 10s (MARINA_UPSTREAM_CONNECT_TIMEOUT="),
        (httpx.PoolTimeout, 503, "pool_timeout", 1, "MARINA_UPSTREAM_POOL_TIMEOUT="),
    ],
)
def test_each_transport_failure_is_its_envelope_and_its_kind(provider, fault, status, kind, tries, said):
    def handler(request: httpx.Request) -> httpx.Response:
        raise fault("failed", request=request)

    sent = provider(handler)
    response = call()
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"]) == ("server_error", "upstream_error") and said in error["message"]
    assert MARINA_KEY not in response.text and PROVIDER_KEY not in response.text
    assert len(sent) == tries  # only a connect error is tried again: the request never left
    trace = traced(response)
    assert (trace.status, trace.http_status, trace.error_kind) == ("error", status, kind)


def test_a_body_that_does_not_decode_is_a_502_bad_encoding(provider):
    provider(lambda request: httpx.Response(200, headers={"content-encoding": "gzip"}, content=b"not gzip at all"))
    response = call()
    assert response.status_code == 502, response.text
    assert response.json()["error"]["code"] == "upstream_error"
    assert traced(response).error_kind == "bad_encoding"
