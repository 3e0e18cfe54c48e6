"""/v1 through its own handler (marina/mounts.py) answers exactly as the whole
site's Django handler would, and hops to no thread.

Two live servers share one process, database and scripted upstream: one runs
`marina.asgi.application` (the API's handler for /v1, the one door), the other
`marina.asgi.site_application` (Django's handler with all of
settings.MIDDLEWARE in front of the same NinjaAPI). Each case sends the same
request to both, with the upstream scripted the same way, and compares status,
headers, body, and the trace with its spans: dropping the middleware /v1 does
not use changed nothing a client or the ledger sees."""
from __future__ import annotations

import asyncio
import logging
import re
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from ledger.models import Trace
from marina import mounts
from marina.asgi import application
from tests.conftest import MARINA_KEY
from tests.upstream import Reply, Reset, Sse, completion, sse_chunks

VARYING_HEADERS = {"date", "server", "x-request-id", "x-marina-overhead-ms"}
TRACE_FIELDS = (
    "method path key_name requested_model route formation_label session stream status http_status "
    "error_kind error_message prompt_tokens completion_tokens cost_nanousd body"
).split()
SPAN_FIELDS = (
    "seq parent_seq name provider upstream_model status http_status error_kind prompt_tokens "
    "completion_tokens cached_tokens reasoning_tokens cost_nanousd cost_source detail body"
).split()


def _trace_view(request_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """The trace of the call that sent x-request-id `request_id` (Marina's own id differs: kept as client_request_id)."""
    trace = Trace.objects.filter(client_request_id=request_id).first()
    if trace is None:
        return None
    spans = [{f: getattr(s, f) for f in SPAN_FIELDS} for s in trace.spans.order_by("seq")]
    return {f: getattr(trace, f) for f in TRACE_FIELDS}, spans


def _wait_for_trace(request_id: str, timeout: float = 5.0) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _trace_view(request_id)
        if found is not None:
            return found
        time.sleep(0.05)
    return None


def _headers_view(response: httpx.Response) -> list[tuple[str, str]]:
    return sorted((k.lower(), v) for k, v in response.headers.multi_items() if k.lower() not in VARYING_HEADERS)


def _fixed_replies(body: Any) -> Reply | Sse:
    """The upstream's default answers with a fixed `created`, so that the two
    servers' answers can be compared byte for byte."""
    if isinstance(body, dict) and body.get("stream"):
        return Sse(chunks=[{**c, "created": 1_700_000_000} for c in sse_chunks()])
    model = str(body.get("model")) if isinstance(body, dict) else "scripted-model"
    return Reply(json={**completion(model=model), "created": 1_700_000_000})


def both(
    urls: dict[str, str],
    upstream: Any,
    script: Callable[[], None],
    *,
    content: bytes,
    headers: dict[str, str] | None = None,
    expect_trace: bool = True,
) -> dict[str, tuple[httpx.Response, Any]]:
    """Send one request to each server (scripting the upstream before each)
    and return {name: (response, trace view)}."""
    seen = {}
    for name, base in urls.items():
        upstream.reset()
        upstream.handler = _fixed_replies
        script()
        request_id = f"req-{name}-{time.monotonic_ns()}"
        sent = {"authorization": f"Bearer {MARINA_KEY}", "content-type": "application/json", "x-request-id": request_id}
        sent.update(headers or {})
        with httpx.Client(timeout=10) as client:
            response = client.post(f"{base}/v1/chat/completions", content=content, headers=sent)
            response.read()
        trace = _wait_for_trace(request_id) if expect_trace else _trace_view(request_id)
        seen[name] = (response, trace)
    return seen


def assert_same(seen: dict[str, tuple[httpx.Response, Any]]) -> httpx.Response:
    (door, door_trace), (site, site_trace) = seen["door"], seen["site"]
    assert door.status_code == site.status_code
    assert door.content == site.content
    assert _headers_view(door) == _headers_view(site)
    assert ("x-marina-overhead-ms" in door.headers) == ("x-marina-overhead-ms" in site.headers)
    for response in (door, site):
        if "x-marina-overhead-ms" in response.headers:
            # Milliseconds with two decimals, within what the client waited in all.
            overhead = response.headers["x-marina-overhead-ms"]
            assert re.fullmatch(r"\d+\.\d\d", overhead), overhead
            assert float(overhead) <= response.elapsed.total_seconds() * 1000
    assert ("x-request-id" in door.headers) == ("x-request-id" in site.headers)
    assert door_trace == site_trace
    return door


def _body(**extra: Any) -> bytes:
    import json

    return json.dumps({"model": "openrouter/openai/gpt-5.2", "messages": [{"role": "user", "content": "ping"}], **extra}).encode()


async def _get(app: Any, path: str, headers: list[tuple[bytes, bytes]]) -> tuple[int, dict[str, str]]:
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"testserver"), *headers], "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    await app(scope, receive, send)
    return sent[0]["status"], {k.decode().lower(): v.decode() for k, v in sent[0]["headers"]}


def test_security_settings_apply_to_v1(settings):
    """HSTS (on a secure request), a changed Referrer-Policy and the SSL
    redirect reach /v1 as they reach the site: Django's own middleware set them."""
    settings.ALLOWED_HOSTS = ["testserver"]
    settings.SECURE_HSTS_SECONDS = 60
    settings.SECURE_REFERRER_POLICY = "no-referrer"
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    handler = mounts.ApiHandler()  # the middleware read the settings when loaded
    status, headers = asyncio.run(_get(handler, "/v1/health", [(b"x-forwarded-proto", b"https")]))
    assert status == 200 and headers["strict-transport-security"] == "max-age=60"
    assert headers["referrer-policy"] == "no-referrer"
    settings.SECURE_SSL_REDIRECT = True
    status, headers = asyncio.run(_get(mounts.ApiHandler(), "/v1/health", []))
    assert status == 301 and headers["location"] == "https://testserver/v1/health"


def test_v1_has_its_own_handler_with_the_header_middleware_only(settings):
    doors = application.app
    assert isinstance(doors, mounts.Doors) and isinstance(doors.api, mounts.ApiHandler)
    assert mounts.api_middleware() == [
        "django.middleware.security.SecurityMiddleware",
        "django.middleware.common.CommonMiddleware",
        "django.middleware.clickjacking.XFrameOptionsMiddleware",
    ]
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if "clickjacking" not in m]
    assert "django.middleware.clickjacking.XFrameOptionsMiddleware" not in mounts.api_middleware()


def test_plain_completion(urls, upstream):
    reply = Reply(json=completion("pong", cost=0.00123))  # one payload: `created` must not tick between the two
    seen = both(urls, upstream, lambda: upstream.script(reply), content=_body())
    response = assert_same(seen)
    assert response.status_code == 200 and response.headers["x-marina-cost-usd"] == "0.00123000"
    assert seen["door"][1][0]["status"] == "ok" and seen["door"][1][1][0]["cost_nanousd"] == 1_230_000
    # The API's headers (docs/performance.md), from Django's header middleware; no cookie of any kind.
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "same-origin"
    assert response.headers["cross-origin-opener-policy"] == "same-origin"
    assert response.headers["content-length"] == str(len(response.content))
    assert "set-cookie" not in response.headers and "vary" not in response.headers


def test_a_doors_post_is_answered_without_djangos_request_and_response(urls, upstream, monkeypatch):
    """With the header middleware letting the request through (the settings
    Marina ships), the door answers from the ASGI scope (mounts.passes_through),
    the same answer as the site's Django path, header for header."""
    answered: list[str] = []
    answer = mounts.answer_scope

    async def counted(scope: Any) -> Any:
        answered.append(scope["path"])
        return await answer(scope)

    monkeypatch.setattr(mounts, "answer_scope", counted)
    assert_same(both(urls, upstream, lambda: None, content=_body()))
    assert_same(both(urls, upstream, lambda: None, content=_body(stream=True)))
    assert answered == ["/v1/chat/completions"] * 2


def test_settings_that_make_the_middleware_act_on_a_request_send_it_through_django(urls, upstream, settings, monkeypatch):
    """CommonMiddleware refuses an agent, or redirects to www.: Django's path
    answers, as the site's does, not the core."""
    answered: list[str] = []
    monkeypatch.setattr(mounts, "answer_scope", lambda scope: answered.append(scope["path"]))
    settings.DISALLOWED_USER_AGENTS = [re.compile("^bad-agent")]
    refused = assert_same(
        both(urls, upstream, lambda: None, content=_body(), headers={"user-agent": "bad-agent/1"}, expect_trace=False)
    )
    assert refused.status_code != 200
    settings.DISALLOWED_USER_AGENTS = []
    settings.PREPEND_WWW = True
    for response, _ in both(urls, upstream, lambda: None, content=_body(), expect_trace=False).values():
        assert response.status_code == 301 and response.headers["location"].startswith("http://www.127.0.0.1:")
    assert answered == []


def test_an_error_answer_is_logged_as_djangos_handler_logs_it(urls, upstream, caplog):
    """django.request's warning for a 4xx (and error for a 5xx), on the direct way as on Django's."""
    logged = {}
    for name, url in urls.items():
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="django.request"):
            with httpx.Client(timeout=10) as client:
                response = client.post(f"{url}/v1/chat/completions", content=_body(), headers={"authorization": "Bearer wrong"})
        assert response.status_code == 401
        logged[name] = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "django.request"]
    assert logged["door"] == logged["site"] == [("WARNING", "Unauthorized: /v1/chat/completions")]


def test_a_changed_setting_changes_the_headers_the_middleware_add_on_the_direct_way(urls, upstream, settings):
    settings.X_FRAME_OPTIONS = "SAMEORIGIN"  # read by XFrameOptionsMiddleware on each response
    response = assert_same(both(urls, upstream, lambda: None, content=_body()))
    assert response.headers["x-frame-options"] == "SAMEORIGIN"
    settings.X_FRAME_OPTIONS = "DENY"
    assert assert_same(both(urls, upstream, lambda: None, content=_body())).headers["x-frame-options"] == "DENY"


def test_stream_with_and_without_usage(urls, upstream):
    response = assert_same(both(urls, upstream, lambda: None, content=_body(stream=True)))
    assert response.headers["content-type"] == "text/event-stream"
    assert response.content.endswith(b"data: [DONE]\n\n") and b'"usage"' not in response.content
    response = assert_same(
        both(urls, upstream, lambda: None, content=_body(stream=True, stream_options={"include_usage": True}))
    )
    assert b'"usage"' in response.content


@pytest.mark.parametrize(
    ("content", "headers", "status"),
    [
        (_body(), {"authorization": "Bearer wrong"}, 401),
        (_body(), {"authorization": ""}, 401),
        (b"{not json", {}, 400),
        (b"[1, 2]", {}, 400),
        (_body(messages=[]), {}, 400),
        (_body(stream="yes"), {}, 400),
        (_body(model="marina/default"), {}, 404),  # no MARINA_DEFAULT_MODEL in tests
        (_body(model="together/x"), {}, 503),  # an aggregator without its key
    ],
)
def test_errors_marina_decides(urls, upstream, content, headers, status):
    response = assert_same(both(urls, upstream, lambda: None, content=content, headers=headers))
    assert response.status_code == status and "error" in response.json()


def test_upstream_error_status_is_relayed(urls, upstream):
    reply = Reply(json={"error": {"message": "boom", "type": "server_error"}}, status=500)
    response = assert_same(both(urls, upstream, lambda: upstream.script(reply), content=_body()))
    assert response.status_code == 500


def test_upstream_reset_and_bad_json(urls, upstream):
    response = assert_same(both(urls, upstream, lambda: upstream.script(Reset(), Reset()), content=_body()))
    assert response.status_code == 502
    response = assert_same(both(urls, upstream, lambda: upstream.script(Reply(raw=b"<html>")), content=_body()))
    assert response.json()["error"]["code"] == "bad_upstream_response"


def test_stream_reset_midway(urls, upstream):
    chunks = [{**c, "created": 1_700_000_000} for c in sse_chunks()]  # `created` must not tick between the two
    response = assert_same(
        both(urls, upstream, lambda: upstream.script(Sse(chunks=chunks, reset_after=2)), content=_body(stream=True))
    )
    assert b'"upstream_error"' in response.content


def test_declared_body_too_large_is_413_refused_unread_and_traced(urls, upstream, settings):
    settings.MARINA_MAX_REQUEST_BYTES = 2048
    seen = both(urls, upstream, lambda: None, content=_body(pad="x" * 4096))
    response = assert_same(seen)
    assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"
    assert seen["door"][1][0]["error_kind"] == "request_too_large" and upstream.requests == []


def test_body_too_large_has_one_wording_declared_or_read_on_both_routes(urls, upstream, settings):
    """The 413 is built once (passthru.errors.request_too_large): a declared
    Content-Length refused unread and a chunked body refused once it passes the
    limit (read no further, so its size is never known) say the same thing, on
    the API's handler and the whole site's alike."""
    settings.MARINA_MAX_REQUEST_BYTES = 2048
    content = _body(pad="x" * 4096)
    expected = {
        "message": "Request body is too large; the limit is MARINA_MAX_REQUEST_BYTES=2048.",
        "type": "invalid_request_error",
        "param": None,
        "code": "request_too_large",
    }
    declared = assert_same(both(urls, upstream, lambda: None, content=content))
    answers = {"declared": declared.json()}
    for name, base in urls.items():
        # An iterator body goes out chunked, with no Content-Length to refuse on.
        request_id = f"req-chunked-{name}-{time.monotonic_ns()}"
        headers = {"authorization": f"Bearer {MARINA_KEY}", "x-request-id": request_id}
        response = httpx.post(f"{base}/v1/chat/completions", content=iter([content[:1000], content[1000:]]), headers=headers)
        assert "content-length" not in response.request.headers and response.status_code == 413
        answers[f"chunked-{name}"] = response.json()
        trace = _wait_for_trace(request_id)
        assert trace is not None and trace[0]["error_kind"] == "request_too_large"
    assert answers == {k: {"error": expected} for k in answers}
    assert upstream.requests == []


def test_an_unexpected_failure_outside_the_core_is_the_same_500_on_both_routes(urls, upstream, monkeypatch):
    """A bug that escapes the core is answered by marina/api.py's handler, one envelope."""

    async def broken(inbound: Any) -> Any:
        raise RuntimeError("a bug with a secret sk-or-xyz")

    monkeypatch.setattr("passthru.api.chat_completions", broken)
    response = assert_same(both(urls, upstream, lambda: None, content=_body(), expect_trace=False))
    assert response.status_code == 500
    assert response.json() == {
        "error": {"message": "Marina failed on this request.", "type": "server_error", "param": None, "code": "internal_error"}
    }


def test_an_unexpected_failure_in_the_core_is_the_same_500_on_both_routes(urls, upstream, monkeypatch):
    def broken(model_id: str) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr("passthru.doors.chat.plan", broken)
    seen = both(urls, upstream, lambda: None, content=_body())
    bodies = {}
    for name, (response, trace) in seen.items():
        request_id = response.headers["x-request-id"]
        assert response.status_code == 500 and trace is not None and trace[0]["error_kind"] == "internal_error"
        bodies[name] = response.json()["error"] | {"message": response.json()["error"]["message"].replace(request_id, "ID")}
    assert bodies["door"] == bodies["site"] == {
        "message": "Marina failed on this request (ID).", "type": "server_error", "param": None, "code": "internal_error"
    }


def test_request_headers_reach_the_core_alike(urls, upstream):
    """Underscored names are dropped and repeats joined, as Django does; the
    session header and user agent land in the trace and upstream request."""
    seen = both(
        urls,
        upstream,
        lambda: None,
        content=_body(),
        headers={"x-marina-session": "s-1", "user-agent": "agent/1", "x_marina_session": "spoof"},
    )
    assert_same(seen)
    assert seen["door"][1][0]["session"] == "s-1"


def test_non_latin1_header_values_are_encoded_like_django(urls, upstream):
    # The served model id goes into x-marina-upstream-model.
    response = assert_same(both(urls, upstream, lambda: None, content=_body(model="openrouter/模型")))
    assert response.headers["x-marina-upstream-model"].startswith("=?utf-8?")


def test_a_header_django_refuses_is_the_same_500_on_both_routes(urls, upstream, monkeypatch):
    """A line break in a header value (no core sends one): Django's response
    refuses it in the view, and marina/api.py's handler answers; the direct
    way answers the same."""
    from passthru.outbound import Outbound

    async def core(inbound: Any) -> Outbound:
        return Outbound(200, {"x-marina-note": "one\r\nSet-Cookie: two"}, b"{}")

    monkeypatch.setattr("passthru.api.chat_completions", core)
    response = assert_same(both(urls, upstream, lambda: None, content=_body(), expect_trace=False))
    assert response.status_code == 500 and "set-cookie" not in response.headers


def test_disallowed_host_is_refused_by_djangos_host_check(urls, upstream):
    before = Trace.objects.count()
    response = assert_same(both(urls, upstream, lambda: None, content=_body(), headers={"host": "evil.example"}, expect_trace=False))
    assert response.status_code == 400 and Trace.objects.count() == before


def test_client_gone_mid_stream_is_traced_cancelled(urls, upstream):
    views = {}
    for name, base in urls.items():
        upstream.reset()
        upstream.script(Sse(stall_after=2, stall_seconds=1))
        request_id = f"req-gone-{name}"
        headers = {"authorization": f"Bearer {MARINA_KEY}", "x-request-id": request_id}
        with httpx.Client(timeout=10) as client:
            with client.stream("POST", f"{base}/v1/chat/completions", content=_body(stream=True), headers=headers) as response:
                next(response.iter_raw())  # the first event, then hang up
        views[name] = _wait_for_trace(request_id)
    assert views["door"] == views["site"]
    assert views["door"] is not None and views["door"][0]["status"] == "cancelled"
    assert views["door"][0]["error_kind"] == "client_disconnected"


def _abandon_plain_calls(urls, upstream, *, delay: float, prefix: str) -> dict[str, Any]:
    """On each handler, a plain call whose client hangs up (0.3 s) before the
    upstream answers (`delay`): each handler's one trace, as _wait_for_trace reads it."""
    views = {}
    for name, base in urls.items():
        upstream.reset()
        upstream.script(Reply(json=completion("late"), delay=delay))
        request_id = f"{prefix}-{name}"
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(
                f"{base}/v1/chat/completions",
                content=_body(),
                headers={"authorization": f"Bearer {MARINA_KEY}", "x-request-id": request_id},
                timeout=httpx.Timeout(10, read=0.3),
            )
        views[name] = _wait_for_trace(request_id, timeout=10)
    return views


def test_client_gone_while_waiting_on_a_plain_call(urls, upstream):
    """Both handlers cancel the view when the client hangs up, so both leave
    the same trace behind: cancelled, 499. The upstream call, which the
    provider bills, is let end within MARINA_DRAIN_AFTER_DISCONNECT_SECONDS and
    metered (issue 10): its span is ok and the trace carries its cost."""
    views = _abandon_plain_calls(urls, upstream, delay=1.0, prefix="req-gone-plain")
    for name in urls:
        assert Trace.objects.filter(client_request_id=f"req-gone-plain-{name}").count() == 1
    assert views["door"] is not None and views["door"] == views["site"]
    trace, spans = views["door"]
    assert (trace["status"], trace["http_status"], trace["error_kind"]) == ("cancelled", 499, "client_disconnected")
    assert [(s["status"], s["error_kind"], s["http_status"]) for s in spans] == [("ok", "", 200)]
    assert spans[0]["cost_nanousd"] and trace["cost_nanousd"] == spans[0]["cost_nanousd"]


def test_client_gone_while_waiting_on_a_plain_call_past_the_drain(urls, upstream, settings):
    """A reply slower than MARINA_DRAIN_AFTER_DISCONNECT_SECONDS: Marina hangs
    up at the bound, the upstream call is marked cancelled, no cost."""
    settings.MARINA_DRAIN_AFTER_DISCONNECT_SECONDS = 0.3
    views = _abandon_plain_calls(urls, upstream, delay=2.0, prefix="req-gone-plain-cut")
    assert views["door"] is not None and views["door"] == views["site"]
    trace, spans = views["door"]
    assert (trace["status"], trace["http_status"], trace["error_kind"]) == ("cancelled", 499, "client_disconnected")
    assert [(s["status"], s["error_kind"], s["http_status"], s["cost_nanousd"]) for s in spans] == [
        ("cancelled", "client_disconnected", None, None)
    ]


def test_other_v1_routes_and_unknown_paths(urls):
    for base in urls.values():
        assert httpx.get(f"{base}/v1/health").json() == {"status": "ok", "engine": "marina", "spool": "ok"}
        # Each path has its own match (the API's handler keeps them: marina/mounts.py), asked twice.
        for path in ("/v1/chat/completions/extra", "/v1/nope", "/v1/chat/completions/extra", "/v1/nope"):
            missing = httpx.get(f"{base}{path}")
            assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
            assert missing.json()["error"]["message"] == f"Unknown API path: GET {path}"


def test_v1_hops_to_no_thread(urls, upstream, monkeypatch):
    """No sync_to_async on the way through the API's handler (the whole
    site's handler takes several per request: its middleware hooks, the
    signals and close())."""
    from asgiref import sync

    hops: dict[str, list[str]] = {"door": [], "site": []}
    current = {"name": ""}
    original = sync.SyncToAsync.__call__

    async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        hops[current["name"]].append(getattr(self.func, "__qualname__", repr(self.func)))
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(sync.SyncToAsync, "__call__", counted)
    for name, base in urls.items():
        current["name"] = name
        upstream.reset()
        upstream.script(Reply(json=completion("pong")))
        headers = {"authorization": f"Bearer {MARINA_KEY}", "content-type": "application/json"}
        assert httpx.post(f"{base}/v1/chat/completions", content=_body(), headers=headers, timeout=10).status_code == 200
    assert hops["door"] == [] and len(hops["site"]) >= 3


def _stream_response(parts: list[bytes], seen: list[Any], ended: list[str]) -> Any:
    from django.http import StreamingHttpResponse

    response = StreamingHttpResponse(content_type="text/event-stream")

    async def events() -> Any:
        try:
            for part in parts:
                # Who reads this stream, and which headers the response holds meanwhile.
                seen.append((sys._getframe(1).f_code.co_name, dict(response.items())))
                yield part
        finally:
            ended.append("closed")

    response.streaming_content = events()
    response["x-request-id"] = "req-1"
    response.set_cookie("c", "v")
    return response


def _send_into(messages: list[dict[str, Any]], cancel_at: int | None = None) -> Any:
    async def send(message: dict[str, Any]) -> None:
        if cancel_at is not None and len(messages) == cancel_at:
            raise asyncio.CancelledError
        messages.append(message)

    return send


def test_a_stream_is_sent_as_djangos_handler_sends_it_read_directly_and_its_headers_let_go():
    """/v1's handler sends a stream's messages exactly as Django's does, but
    reads the stream itself (no generator of Django's between them) and lets
    go of the headers once sent: a worker holds thousands of streams for
    minutes (docs/performance.md, issue 45)."""
    from django.core.handlers.asgi import ASGIHandler

    parts = [b"data: 1\n\n", b"", b"data: 2\n\n"]
    ours: list[dict[str, Any]] = []
    djangos: list[dict[str, Any]] = []
    seen: list[Any] = []
    ended: list[str] = []
    asyncio.run(mounts.ApiHandler().send_response(_stream_response(parts, seen, ended), _send_into(ours)))
    asyncio.run(ASGIHandler().send_response(_stream_response(parts, [], []), _send_into(djangos)))
    assert ours == djangos
    assert ours[0]["headers"][-1][0] == b"Set-Cookie" and (b"x-request-id", b"req-1") in ours[0]["headers"]
    assert [message.get("body") for message in ours[1:]] == [*parts, None]
    assert seen == [("send_response", {})] * 3
    assert ended == ["closed"]


def test_a_stream_whose_client_left_is_closed_before_the_handler_returns():
    """A cancellation while a part is sent (the client gone) closes the
    stream at once: relay_and_record's GeneratorExit hands the upstream call
    to its drain and traces the request (passthru/lifecycle.py)."""
    messages: list[dict[str, Any]] = []
    ended: list[str] = []
    response = _stream_response([b"data: 1\n\n", b"data: 2\n\n"], [], ended)

    async def serve() -> list[str]:
        with pytest.raises(asyncio.CancelledError):
            await mounts.ApiHandler().send_response(response, _send_into(messages, cancel_at=2))
        return list(ended)  # before the loop's shutdown closes whatever generators are left

    assert asyncio.run(serve()) == ["closed"] and len(messages) == 2
