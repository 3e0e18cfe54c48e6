"""Refused before the body is read (passthru/intake.py), through /v1's handler
and through the whole site's (marina/asgi.py).

Each request is a chunked body that is never finished: the client sends the
headers and some chunks, then waits for the answer. A server that reads the
body before deciding (as Django's handler did) never answers; one that refuses
from the headers, or stops at the limit, answers at once."""
from __future__ import annotations

import pytest

from ledger.models import BenchmarkRun, Trace
from tests.conftest import MARINA_KEY
from tests.rawhttp import CHUNK, CLOSING, LAST_CHUNK, answer, chunk, open_chunked

OPERATOR_KEY = "sk-marina-operator-key-1"  # `secret:*`: its callers name themselves with X-Marina-Agent


@pytest.mark.parametrize("route", ["door", "site"])
@pytest.mark.parametrize(
    "headers, status, code",
    [
        ({}, 401, "invalid_api_key"),
        ({"authorization": "Bearer sk-wrong"}, 401, "invalid_api_key"),
        ({"authorization": f"Bearer {OPERATOR_KEY}", "x-marina-agent": "no spaces"}, 400, "invalid_agent_name"),
    ],
    ids=["no key", "wrong key", "bad agent name"],
)
def test_a_call_without_a_valid_key_is_refused_before_its_body(urls, upstream, settings, route, headers, status, code):
    settings.MODEL_API_KEYS = f"{MARINA_KEY}:tester,{OPERATOR_KEY}:*"
    request_id = f"req-nokey-{route}-{status}-{len(headers)}"
    with open_chunked(urls[route], "/v1/chat/completions", {**headers, "x-request-id": request_id}, chunks=4) as sock:
        got, _, payload = answer(sock)
    assert got == status and payload["error"]["code"] == code
    trace = Trace.objects.get(client_request_id=request_id)  # committed before the answer
    assert trace.http_status == status and trace.error_kind == code and upstream.requests == []


@pytest.mark.parametrize("route", ["door", "site"])
def test_a_chunked_body_over_the_limit_is_refused_where_it_passes_it(urls, upstream, settings, route):
    settings.MARINA_MAX_REQUEST_BYTES = 64 * 1024
    request_id = f"req-over-{route}"
    headers = {"authorization": f"Bearer {MARINA_KEY}", "x-request-id": request_id}
    with open_chunked(urls[route], "/v1/chat/completions", headers, chunks=20) as sock:  # 80 KiB, no end
        status, _, payload = answer(sock)
    assert status == 413 and payload["error"] == {
        "message": "Request body is too large; the limit is MARINA_MAX_REQUEST_BYTES=65536.",
        "type": "invalid_request_error",
        "param": None,
        "code": "request_too_large",
    }
    assert Trace.objects.get(client_request_id=request_id).error_kind == "request_too_large" and upstream.requests == []


@pytest.mark.parametrize("route", ["door", "site"])
def test_a_body_under_the_limit_in_many_chunks_is_served(urls, upstream, settings, route):
    settings.MARINA_MAX_REQUEST_BYTES = 64 * 1024
    with open_chunked(urls[route], "/v1/chat/completions", {"authorization": f"Bearer {MARINA_KEY}"}, chunks=8) as sock:
        sock.sendall(chunk(CLOSING) + LAST_CHUNK)
        status, _, payload = answer(sock)
    assert status == 200 and payload["object"] == "chat.completion"
    assert len(upstream.requests[0].body["messages"][0]["content"]) == 8 * len(CHUNK)


def test_an_upload_has_its_own_larger_limit_also_when_chunked(urls, settings):
    settings.MARINA_MAX_REQUEST_BYTES = 16 * 1024
    settings.MARINA_MAX_UPLOAD_BYTES = 64 * 1024
    headers = {"authorization": f"Bearer {MARINA_KEY}"}
    with open_chunked(urls["door"], "/v1/benchmarks/runs", headers, chunks=20) as sock:
        status, _, payload = answer(sock)
    assert status == 413
    assert payload["error"]["message"] == "Request body is too large; the limit is MARINA_MAX_UPLOAD_BYTES=65536."
    with open_chunked(urls["door"], "/v1/benchmarks/runs", {}, chunks=4) as sock:
        assert answer(sock)[0] == 401
    # Past the chat limit but within the upload's: read whole, and judged on its content.
    with open_chunked(urls["door"], "/v1/benchmarks/runs", headers, chunks=8) as sock:
        sock.sendall(chunk(CLOSING) + LAST_CHUNK)
        status, _, payload = answer(sock)
    assert status == 400 and "result" in payload["error"]["message"]
    assert not BenchmarkRun.objects.exists()


def test_other_paths_stop_reading_at_the_limit_too(urls, settings):
    settings.MARINA_MAX_REQUEST_BYTES = 64 * 1024
    with open_chunked(urls["door"], "/admin/login/", {}, chunks=20) as sock:
        status, headers, payload = answer(sock)
    assert status == 413 and payload["error"]["code"] == "request_too_large"
