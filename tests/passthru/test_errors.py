"""Every auth and error path of /v1/chat/completions: OpenAI's error envelope,
the right status and code, and a trace with the error kind for each. Marina runs
in-process (tests/conftest.py's `marina`); the faults of the connection to the
provider (a dead port, resets, timeouts, a trickle past the deadline) go
through a live Marina to the scripted upstream's real socket (`live_http`)."""
from __future__ import annotations

import gc
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest

from ledger.models import SpendDaily, Trace
from passthru import upstream as upstream_client
from passthru.context import RequestContext
from tests.conftest import MARINA_KEY, PROVIDER_KEY
from tests.e2e.servers import free_port
from tests.upstream import Reply, Reset, Sse, completion

MODEL = "openrouter/openai/gpt-5.2"
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture
def http(marina) -> Iterator[httpx.Client]:
    with marina.client(headers={"authorization": f"Bearer {MARINA_KEY}"}, timeout=30) as client:
        yield client


@pytest.fixture
def live_http(marina_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=marina_url, headers={"authorization": f"Bearer {MARINA_KEY}"}, timeout=30) as client:
        yield client


def post(http: httpx.Client, body: Any = None, **kw: Any) -> httpx.Response:
    if body is None:
        body = {"model": MODEL, "messages": HELLO}
    return http.post("/v1/chat/completions", json=body, **kw)


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    """The OpenAI envelope's error object, after checking status and shape."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    payload = response.json()
    assert list(payload) == ["error"] and set(payload["error"]) == {"message", "type", "param", "code"}, payload
    return payload["error"]


def traced(response: httpx.Response, error_kind: str) -> Trace:
    trace = Trace.objects.get(request_id=response.headers["x-request-id"])
    assert (trace.status, trace.http_status, trace.error_kind) == ("error", response.status_code, error_kind)
    return trace


# --- Auth -------------------------------------------------------------------------
def test_missing_key_is_401(http):
    response = post(http, headers={"authorization": ""})
    error = error_of(response, 401)
    assert (error["type"], error["code"]) == ("authentication_error", "invalid_api_key")
    assert "Authorization" in error["message"]
    traced(response, "invalid_api_key")


def test_invalid_key_is_401_and_never_recorded(http):
    response = post(http, headers={"authorization": "Bearer sk-wrong-key-000000000000"})
    assert error_of(response, 401)["message"] == "Invalid API key."
    trace = traced(response, "invalid_api_key")
    assert trace.key_name == ""
    assert "sk-wrong" not in str(Trace.objects.values().get(pk=trace.pk))


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "bEaReR"])
def test_the_bearer_scheme_is_case_insensitive(marina, upstream, scheme):
    """RFC 9110 section 11.1: the auth scheme is case-insensitive; the key itself is not."""
    with marina.client(timeout=30) as client:
        response = client.post(
            "/v1/chat/completions", json={"model": MODEL, "messages": HELLO}, headers={"authorization": f"{scheme} {MARINA_KEY}"}
        )
        assert response.status_code == 200, response.text
        assert Trace.objects.get(request_id=response.headers["x-request-id"]).key_name == "tester"
        wrong_case_key = client.post(
            "/v1/chat/completions",
            json={"model": MODEL, "messages": HELLO},
            headers={"authorization": f"{scheme} {MARINA_KEY.upper()}"},
        )
    assert error_of(wrong_case_key, 401)["message"] == "Invalid API key."
    assert len(upstream.requests) == 1


@pytest.mark.parametrize("header", ["Basic dXNlcjpwYXNz", "Bearer", "Bearer\t\tx", MARINA_KEY, f"Token {MARINA_KEY}"])
def test_other_schemes_and_empty_credentials_are_401(http, upstream, header):
    response = post(http, headers={"authorization": header})
    assert "Authorization" in error_of(response, 401)["message"]
    assert upstream.requests == []


def test_no_keys_and_api_not_opened_is_401_naming_both_variables(http, settings):
    settings.MODEL_API_KEYS = ""
    settings.MARINA_OPEN_API = False
    response = post(http)
    message = error_of(response, 401)["message"]
    assert "MODEL_API_KEYS" in message and "MARINA_OPEN_API=true" in message
    traced(response, "invalid_api_key")


def test_open_mode_serves_without_a_key(marina, settings, upstream):
    settings.MODEL_API_KEYS = ""
    settings.MARINA_OPEN_API = True
    response = marina.http.post("/v1/chat/completions", json={"model": MODEL, "messages": HELLO}, timeout=30)
    assert response.status_code == 200, response.text
    trace = Trace.objects.get(request_id=response.headers["x-request-id"])
    assert (trace.status, trace.key_name) == ("ok", "open")
    assert upstream.requests[0].headers["authorization"] == f"Bearer {PROVIDER_KEY}"  # the provider's key, always


# --- Routing ----------------------------------------------------------------------------
def test_unknown_prefix_nobody_serves_is_404_model_not_found(http, upstream):
    # A prefix that is not a provider goes through the fallback loop (tests/passthru/test_routing.py).
    upstream.script(Reply(status=404, json={"error": {"message": "no such model"}}))
    response = post(http, {"model": "nowhere/some-model", "messages": HELLO})
    error = error_of(response, 404)
    assert (error["code"], error["param"]) == ("model_not_found", "model")
    assert "openrouter" in error["message"]
    traced(response, "model_not_found")
    assert upstream.requests[0].body["model"] == "nowhere/some-model"


def test_provider_without_key_is_503_naming_the_variable(http, upstream):
    response = post(http, {"model": "together/meta-llama/x", "messages": HELLO})
    error = error_of(response, 503)
    assert "TOGETHER_API_KEY" in error["message"]
    traced(response, "provider_not_configured")
    assert upstream.requests == []


# --- Upstream answers and failures --------------------------------------------------------
@pytest.mark.parametrize("status", [400, 404, 429])
def test_upstream_4xx_passes_through_with_its_status_and_body(http, upstream, status):
    body = {"error": {"message": f"provider says {status}", "type": "invalid_request_error", "param": None, "code": "x"}}
    upstream.script(Reply(status=status, json=body))
    response = post(http)
    assert response.status_code == status
    assert response.json() == body
    traced(response, f"http_{status}")
    assert SpendDaily.objects.get().errors == 1


def test_upstream_4xx_on_a_stream_passes_through(http, upstream):
    body = {"error": {"message": "bad stream", "type": "invalid_request_error", "param": None, "code": None}}
    upstream.script(Reply(status=400, json=body))
    response = post(http, {"model": MODEL, "messages": HELLO, "stream": True})
    assert (response.status_code, response.json()) == (400, body)
    traced(response, "http_400")


@pytest.fixture
def dead_provider(settings):
    port = free_port()  # nothing listens there
    providers = {name: dict(conf) for name, conf in settings.MARINA_PROVIDERS.items()}
    providers["dead"] = {"base_url": f"http://127.0.0.1:{port}/v1", "api_key": "", "key_env": "DEAD_API_KEY", "keyless_ok": "yes"}
    settings.MARINA_PROVIDERS = providers
    return "dead/some-model"


@pytest.mark.parametrize("stream", [False, True])
def test_connect_error_is_502_upstream_error(live_http, dead_provider, stream):
    response = post(live_http, {"model": dead_provider, "messages": HELLO, "stream": stream})
    error = error_of(response, 502)
    assert error["code"] == "upstream_error" and "dead" in error["message"]
    traced(response, "connect")


def test_reset_is_502_upstream_error(live_http, upstream):
    upstream.script(Reset())
    response = post(live_http)
    assert error_of(response, 502)["code"] == "upstream_error"
    traced(response, "reset")


def test_reset_mid_stream_ends_with_an_error_event_and_no_done(live_http, upstream):
    upstream.script(Sse(reset_after=2))
    response = post(live_http, {"model": MODEL, "messages": HELLO, "stream": True})
    assert response.status_code == 200
    events = [e for e in response.text.split("\n\n") if e]
    assert '"upstream_error"' in events[-1] and "[DONE]" not in response.text
    traced(response, "reset")


@pytest.fixture
def short_timeout(settings) -> Iterator[float]:
    settings.MARINA_UPSTREAM_TIMEOUT = 0.5
    upstream_client.use_transport(None)  # the cached clients carry the old timeout
    yield 0.5
    upstream_client.use_transport(None)


@pytest.mark.parametrize("step", [Reply(json=completion(), delay=1.5), Sse(delay=1.5)], ids=["plain", "stream"])
def test_timeout_is_504_naming_the_variable(live_http, upstream, short_timeout, step):
    upstream.script(step)
    response = post(live_http, {"model": MODEL, "messages": HELLO, "stream": isinstance(step, Sse)})
    error = error_of(response, 504)
    assert "MARINA_UPSTREAM_TIMEOUT=0.5" in error["message"]
    traced(response, "timeout")


def test_a_plain_call_has_a_deadline_however_the_bytes_trickle(live_http, upstream, settings):
    """Each gap (0.1 s) is within the idle timeout (1 s), the whole (1 s) is past
    the deadline (0.5 s): the idle timeout alone kept such a call open for ever."""
    settings.MARINA_UPSTREAM_TIMEOUT = 1.0
    settings.MARINA_UPSTREAM_DEADLINE = 0.5
    upstream.script(Reply(json=completion(), trickle=0.1, pieces=10))
    response = post(live_http)
    error = error_of(response, 504)
    assert error["message"] == (
        "Provider 'openrouter' did not finish its answer in 0.5s (MARINA_UPSTREAM_DEADLINE=0.5s)."
    )
    traced(response, "timeout")
    # The provider's connection was closed at the deadline, not left to trickle on.
    # (On a loaded machine the upstream's thread may read the request only after
    # the deadline: it is recorded then, and its answer finds the connection gone.)
    deadline = time.monotonic() + 10
    while (not upstream.requests or upstream.requests[0].outcome == "pending") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert upstream.requests[0].outcome == "client_gone"


def test_a_stream_has_no_deadline_only_the_idle_timeout(live_http, upstream, settings):
    settings.MARINA_UPSTREAM_TIMEOUT = 1.0
    settings.MARINA_UPSTREAM_DEADLINE = 0.3
    upstream.script(Sse(gap=0.1))  # seven events (0.7 s): past the deadline, each gap within the idle timeout
    response = post(live_http, {"model": MODEL, "messages": HELLO, "stream": True})
    assert response.status_code == 200 and response.text.endswith("data: [DONE]\n\n")
    assert Trace.objects.get(request_id=response.headers["x-request-id"]).status == "ok"


@pytest.mark.parametrize("raw", [b"<html>Bad gateway</html>", b'{"truncated": ', b"[1, 2]"])
def test_non_json_upstream_body_is_502(http, upstream, raw):
    upstream.script(Reply(raw=raw, content_type="text/html"))
    response = post(http)
    error = error_of(response, 502)
    assert "not JSON" in error["message"]
    traced(response, "bad_json")


HTML = b"<html><body>502 Bad Gateway</body></html>"


@pytest.mark.parametrize(
    "stream, step",
    [
        (True, Reply(raw=HTML, content_type="text/html")),  # a "successful" answer to a stream
        (True, Reply(raw=HTML, status=500, content_type="text/html; charset=utf-8")),
        (False, Reply(raw=HTML, status=503, content_type="text/html")),  # a proxy's error page
        (False, Reply(raw=b"", status=429, content_type="")),
    ],
    ids=["stream 200 html", "stream 500 html", "plain 503 html", "plain 429 empty"],
)
def test_a_reply_that_is_not_json_is_a_502_envelope(http, upstream, stream, step):
    upstream.script(step)
    response = post(http, {"model": MODEL, "messages": HELLO, "stream": stream})
    error = error_of(response, 502)
    assert (error["type"], error["code"]) == ("server_error", "bad_upstream_response")
    media = step.content_type.split(";")[0] or "no content type"
    assert error["message"] == f"Provider 'openrouter' sent a reply that is not JSON (HTTP {step.status}, {media})."
    trace = traced(response, "bad_json")
    span = trace.spans.get()
    assert (span.status, span.error_kind, span.http_status) == ("error", "bad_json", step.status)


# --- Bad requests --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": HELLO}, "model"),
        ({"model": "", "messages": HELLO}, "model"),
        ({"model": 7, "messages": HELLO}, "model"),
        ({"model": MODEL}, "messages"),
        ({"model": MODEL, "messages": []}, "messages"),
        ({"model": MODEL, "messages": "hello"}, "messages"),
        ({"model": MODEL, "messages": [1]}, "messages[0]"),
        ({"model": MODEL, "messages": [{"content": "no role"}]}, "messages[0]"),
        ({"model": MODEL, "messages": HELLO, "stream": "yes"}, "stream"),
        ({"model": MODEL, "messages": HELLO, "n": "2"}, "n"),
        ({"model": MODEL, "messages": HELLO, "n": True}, "n"),
        ({"model": MODEL, "messages": HELLO, "tools": {}}, "tools"),
        ({"model": MODEL, "messages": HELLO, "tools": [None]}, "tools[0]"),
        ({"model": MODEL, "messages": HELLO, "stream_options": []}, "stream_options"),
    ],
)
def test_bad_request_is_400_naming_the_param(http, upstream, body, param):
    response = post(http, body)
    error = error_of(response, 400)
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    traced(response, "invalid_request_error")
    assert upstream.requests == []


@pytest.mark.parametrize("raw", [b"not json", b"", b"\xff\xfe{}", b'["a list"]', b"null"])
def test_body_that_is_not_a_json_object_is_400(http, raw):
    response = http.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
    error = error_of(response, 400)
    assert error["type"] == "invalid_request_error"
    assert Trace.objects.get(request_id=response.headers["x-request-id"]).http_status == 400


def test_body_over_the_limit_is_413(http, settings, upstream):
    settings.MARINA_MAX_REQUEST_BYTES = 4096
    response = post(http, {"model": MODEL, "messages": [{"role": "user", "content": "x" * 5000}]})
    error = error_of(response, 413)
    assert "MARINA_MAX_REQUEST_BYTES=4096" in error["message"]
    traced(response, "request_too_large")
    assert upstream.requests == []


@pytest.mark.parametrize(("method", "path"), [("POST", "/v1/audio/speech"), ("GET", "/v1/nothing/here"), ("POST", "/v1/completions")])
def test_unknown_path_is_404(http, method, path):
    response = http.request(method, path, json={"model": MODEL})
    error = error_of(response, 404)
    assert error["code"] == "not_found" and path in error["message"]
    traced(response, "not_found")


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [("GET", "/v1/chat/completions", "POST"), ("PUT", "/v1/chat/completions", "POST"), ("DELETE", "/v1/models", "GET"), ("POST", "/v1/health", "GET")],
)
def test_wrong_method_is_405_with_allow(http, method, path, allowed):
    response = http.request(method, path)
    error = error_of(response, 405)
    assert error["code"] == "method_not_allowed" and allowed in error["message"]
    assert response.headers["allow"] == allowed
    traced(response, "method_not_allowed")


# --- The daily cap ---------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
def test_daily_cap_is_429_naming_the_reset_time_and_the_variable(http, upstream, settings, stream):
    settings.MARINA_DAILY_SPEND_CAP_USD = Decimal("0.001")
    upstream.script(Reply(json=completion(cost=0.002)))
    # Its estimate (one completion token) fits under the cap; it costs more: the overshoot is the estimate's error.
    assert post(http, {"model": MODEL, "messages": HELLO, "max_tokens": 1}).status_code == 200
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).date()
    midnight = datetime.combine(tomorrow, datetime.min.time(), tzinfo=UTC)
    to_midnight_before = (midnight - datetime.now(UTC)).total_seconds()
    response = post(http, {"model": MODEL, "messages": HELLO, "stream": stream})
    to_midnight_after = (midnight - datetime.now(UTC)).total_seconds()
    error = error_of(response, 429)
    assert error["code"] == "spend_cap_reached"
    assert f"resets at {tomorrow:%Y-%m-%d} 00:00 UTC" in error["message"]
    assert "MARINA_DAILY_SPEND_CAP_USD" in error["message"] and "$0.00200000" in error["message"]
    # Until the reset: the seconds to it, as the server counted them while the request was in
    # flight (whole seconds), and the openai and anthropic SDKs' own word for "do not retry".
    assert to_midnight_after - 1 <= int(response.headers["retry-after"]) <= to_midnight_before + 1
    assert response.headers["x-should-retry"] == "false"
    traced(response, "spend_cap_reached")
    assert len(upstream.requests) == 1  # refused before any upstream call
    assert SpendDaily.objects.get().calls == 1


# --- Found by fuzzing: bodies that once got a 500 or no answer at all ------------------------
@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_deeply_nested_body_is_400_not_500(http, upstream, depth):
    nested = "[" * depth + "]" * depth
    raw = f'{{"model": "{MODEL}", "messages": [{{"role": "user", "content": {nested}}}]}}'.encode()
    response = http.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
    assert "nested too deeply" in error_of(response, 400)["message"]
    traced(response, "invalid_json")
    assert upstream.requests == []


@pytest.mark.parametrize(
    "model",
    [
        "openrouter/x\x00y",
        "openrouter/x\r\nset-cookie: a=b",
        "openrouter/\ud800",
        "openrouter/" + "x" * 200,
        # Line and paragraph separators, and C1 controls: Python's header
        # encoding splits lines on them, so the answer's headers would be broken.
        "openrouter/x\u2028y",
        "openrouter/x\u2029y",
        "openrouter/x\x85y",
        "openrouter/x\x9by",
    ],
)
def test_model_ids_that_cannot_go_into_headers_or_the_ledger_are_400(http, upstream, model):
    raw = json.dumps({"model": model, "messages": HELLO}).encode()  # ensure_ascii: \u escapes, as a client sends them
    response = http.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
    assert error_of(response, 400)["param"] == "model"
    traced(response, "invalid_request_error")
    assert upstream.requests == []


def test_lone_surrogate_in_a_message_is_forwarded_as_the_client_wrote_it(http, upstream):
    raw = f'{{"model": "{MODEL}", "messages": [{{"role": "user", "content": "a\\ud800b"}}]}}'.encode()
    response = http.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text
    assert upstream.requests[0].body["messages"][0]["content"] == "a\ud800b"
    assert Trace.objects.get().status == "ok" and SpendDaily.objects.get().calls == 1


def test_an_unexpected_failure_is_a_500_envelope_and_traced(http, upstream, monkeypatch):
    def broken(model_id: str) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr("passthru.doors.chat.plan", broken)
    response = post(http)
    error = error_of(response, 500)
    assert (error["type"], error["code"]) == ("server_error", "internal_error")
    assert response.headers["x-request-id"] in error["message"] and "a bug" not in error["message"]
    traced(response, "internal_error")


# --- What an upstream error carries (issue 24) -------------------------------------------
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_an_upstream_429_passes_its_retry_after_on(http, upstream, stream):
    body = {"error": {"message": "slow down", "type": "rate_limit_error", "param": None, "code": "rate_limited"}}
    upstream.script(Reply(status=429, json=body, headers={"Retry-After": "7"}))
    response = post(http, {"model": MODEL, "messages": HELLO, "stream": stream})
    assert (response.status_code, response.json()) == (429, body)
    assert response.headers["retry-after"] == "7"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_an_upstream_error_echoing_a_credential_is_relayed_redacted(http, upstream, stream):
    echoed = f"Invalid header: Authorization: Bearer {PROVIDER_KEY} (and sk-or-v1-0123456789abcdef)"
    upstream.script(Reply(status=401, json={"error": {"message": echoed, "type": "auth", "param": None, "code": 401}}))
    response = post(http, {"model": MODEL, "messages": HELLO, "stream": stream})
    assert response.status_code == 401
    message = response.json()["error"]["message"]
    assert PROVIDER_KEY not in response.text and "sk-or-v1-0123456789abcdef" not in response.text
    assert message == "Invalid header: Authorization: [redacted] (and [redacted])"


@pytest.mark.parametrize("model", ["marina/verfy:openrouter/openai/gpt-5.2", "marina/obligations:marina/argchek:openrouter/x"])
def test_a_mistyped_formation_is_404_naming_the_formations_and_never_sent(http, upstream, model):
    response = post(http, {"model": model, "messages": HELLO})
    error = error_of(response, 404)
    assert (error["code"], error["param"]) == ("model_not_found", "model")
    for prefix in ("marina/verify:", "marina/obligations:", "marina/argcheck:", "marina/lessons:"):
        assert prefix in error["message"]
    traced(response, "model_not_found")
    assert upstream.requests == []


# A failed request leaves no reference cycle holding it (its body, its context,
# its span): a worker runs no automatic collector (kernel/collector.py), and a
# flood of connect errors at c=32 held 545 MB a worker while such cycles waited
# for its next pass (docs/performance.md). Each request's context is freed by
# reference counting once its answer and its trace are done.
def _contexts_freed(limit: float = 3.0) -> bool:
    deadline = time.monotonic() + limit
    while any(isinstance(o, RequestContext) for o in gc.get_objects()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


FAULTS = {
    "connect": (None, False, 502),
    "connect-stream": (None, True, 502),
    "reset": (Reset(), False, 502),
    "reset-mid-stream": (Sse(reset_after=2), True, 200),
    "timeout": (Reply(json=completion(), delay=1.5), False, 504),
    "timeout-stream": (Sse(delay=1.5), True, 504),
    "not-json": (Reply(raw=b"<html>busy</html>", content_type="text/html"), False, 502),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_failed_request_is_freed_without_the_cycle_collector(live_http, upstream, dead_provider, short_timeout, fault):
    step, stream, status = FAULTS[fault]
    upstream.script(Reply(json=completion()))
    assert post(live_http).status_code == 200  # the first call's lazy loads, before counting
    model = dead_provider if step is None else MODEL
    if step is not None:
        upstream.script(step)
    gc.collect()
    gc.disable()
    try:
        response = post(live_http, {"model": model, "messages": HELLO, "stream": stream})
        freed = _contexts_freed()
    finally:
        gc.enable()
    assert response.status_code == status, response.text
    assert freed, f"a request that failed by {fault} is held in a reference cycle"
