"""The /v1 router: parse, delegate, return. Errors are mapped in marina/api.py."""
from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, HttpResponseBase, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt
from ninja import Router

from ledger.spend import services
from passthru import cors
from passthru.context import Inbound
from passthru.doors import common as doors
from passthru.doors.chat import chat_completions
from passthru.doors.embeddings import embeddings
from passthru.doors.messages import anthropic_error, messages
from passthru.doors.responses import responses
from passthru.errors import ApiError, check_request_size, declared_size, internal_error, request_too_large
from passthru.intake import BODY, CHAT_PATH, HEADERS, MESSAGES_PATH, Scope, admitted, admitted_in, headers_of
from passthru.lifecycle import refuse
from passthru.models_list import list_models
from passthru.outbound import Outbound, error_out
from passthru.schemas import (
    AnthropicErrorEnvelope,
    ChatCompletionRequest,
    EmbeddingsRequest,
    ErrorEnvelope,
    Health,
    MessagesRequest,
    ModelList,
    ResponsesRequest,
    inline_schema,
)

log = logging.getLogger(__name__)
router = Router(tags=["v1"])

# One server-sent event of a streamed answer: `data` is a chat.completion.chunk
# as JSON, an error object, or the closing [DONE].
SSE_EVENT = {
    "type": "object",
    "properties": {"data": {"type": "string"}, "event": {"type": "string"}, "id": {"type": "string"}},
    "required": ["data"],
}
_ERRORS = {code: ErrorEnvelope for code in (400, 401, 404, 413, 429, 502, 503, 504)}


def inbound(request: HttpRequest) -> Inbound:
    headers = headers_of(request)
    caller = admitted(request)  # passthru/intake.py checked the key and the size before the body
    check_request_size(declared_size(headers))
    try:
        body = _body_of(request)
    except RequestDataTooBig:
        raise request_too_large() from None
    return Inbound(
        method=request.method or "POST",
        path=request.path,
        headers=headers,
        body=body,
        peer=request.META.get("REMOTE_ADDR") or "",
        caller=caller,
    )


def inbound_of_scope(scope: Scope) -> Inbound:
    """`inbound`, read from the ASGI scope Intake and the API's handler
    prepared (a door's POST: its headers, caller and body are there)."""
    headers = dict(scope[HEADERS])
    caller = admitted_in(scope)
    check_request_size(declared_size(headers))
    client = scope.get("client")
    return Inbound(
        method="POST", path=scope["path"], headers=headers, body=scope.pop(BODY, b""), peer=client[0] if client else "", caller=caller
    )


async def answer_scope(scope: Scope) -> Outbound:
    """A door's POST answered from its ASGI scope, as the door's Ninja view
    answers it from Django's request: the same Inbound, core and refusals,
    and a failure outside the core the 500 marina/api.py's handler gives
    (marina/mounts.py takes this way when Django's header middleware would
    let the request through unchanged)."""
    path = scope["path"]
    try:
        core, envelope = _core_of(path)
        try:
            parsed = inbound_of_scope(scope)
        except ApiError as exc:
            headers = dict(scope[HEADERS])
            return await doors.refuse(Inbound(method="POST", path=path, headers=headers, body=b""), exc, envelope)
        return await core(parsed)
    except ApiError as exc:  # as marina/api.py's handler answers one
        return error_out(exc)
    except Exception as exc:
        return unexpected(scope["method"], path, exc)


def _core_of(path: str) -> tuple[Callable[[Inbound], Awaitable[Outbound]], Callable[[ApiError], Outbound]]:
    """The core behind a door's path, and its error envelope (looked up when
    called, as the views look them up)."""
    if path == CHAT_PATH:
        return chat_completions, error_out
    if path == "/v1/responses":
        return responses, error_out
    if path == "/v1/embeddings":
        return embeddings, error_out
    if path == MESSAGES_PATH:
        return messages, anthropic_error
    raise LookupError(f"no door at {path}")


def unexpected(method: str, path: str, exc: Exception) -> Outbound:
    """Anything that escapes a view or the core is a bug: logged, and still
    answered in OpenAI's envelope (marina/api.py's handler for the Ninja views)."""
    log.error("unexpected error on %s %s", method, path, exc_info=exc)
    return error_out(internal_error())


def _body_of(request: HttpRequest) -> bytes:
    """The body the API's handler handed over in the scope (marina/mounts.py),
    taken out of it so that the Inbound alone holds it; else Django's
    (the site's handler, which serves /v1 too in tests/marina/test_one_door.py)."""
    scope = getattr(request, "scope", None)
    if scope is not None and BODY in scope:
        body: bytes = scope.pop(BODY)
        return body
    return request.body


def _without_body(request: HttpRequest) -> Inbound:
    """The request line and headers only, for requests refused unread."""
    return Inbound(
        method=request.method or "GET",
        path=request.path,
        headers=headers_of(request),
        body=b"",
    )


async def _serve(request: HttpRequest, core: Callable[[Inbound], Awaitable[Outbound]]) -> HttpResponseBase:
    """inbound -> core -> Django response; a body refused before the core is traced too."""
    try:
        parsed = inbound(request)
    except ApiError as exc:
        return to_django(await refuse(_without_body(request), exc))
    return to_django(await core(parsed))


async def _serve_anthropic(request: HttpRequest, core: Callable[[Inbound], Awaitable[Outbound]]) -> HttpResponseBase:
    """As `_serve`, refusals in Anthropic's envelope (/v1/messages)."""
    try:
        parsed = inbound(request)
    except ApiError as exc:
        return to_django(await doors.refuse(_without_body(request), exc, anthropic_error))
    return to_django(await core(parsed))


def to_django(out: Outbound) -> HttpResponseBase:
    response: HttpResponseBase
    if out.stream is not None:
        response = StreamingHttpResponse(out.stream, status=out.status, content_type=out.content_type)
    else:
        response = HttpResponse(out.body, status=out.status, content_type=out.content_type)
    for name, value in out.headers.items():
        response[name] = value
    return response


@router.post(
    "/chat/completions",
    response={200: dict, **_ERRORS},
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": inline_schema(ChatCompletionRequest)}},
        },
        # With "stream": true the answer is server-sent events, not JSON.
        "responses": {200: {"content": {"text/event-stream": {"schema": SSE_EVENT}}}},
    },
    summary="Create a chat completion (passthru or formation)",
)
async def create_chat_completion(request: HttpRequest) -> HttpResponseBase:
    return await _serve(request, chat_completions)


def _door(schema: type, summary: str, *, streams: bool = True, errors: dict[int, Any] | None = None) -> dict[str, Any]:
    """The OpenAPI description of a door: its request schema, and its events when it streams."""
    extra: dict[str, Any] = {
        "requestBody": {"required": True, "content": {"application/json": {"schema": inline_schema(schema)}}},
    }
    if streams:
        extra["responses"] = {200: {"content": {"text/event-stream": {"schema": SSE_EVENT}}}}
    return {"response": {200: dict, **(errors or _ERRORS)}, "openapi_extra": extra, "summary": summary}


@router.post(
    "/responses",
    **_door(ResponsesRequest, "Create a model response (Responses API: native for openai and openrouter, else translated)"),
)
async def create_response(request: HttpRequest) -> HttpResponseBase:
    return await _serve(request, responses)


@router.post("/embeddings", **_door(EmbeddingsRequest, "Create embeddings (passthru, metered)", streams=False))
async def create_embeddings(request: HttpRequest) -> HttpResponseBase:
    return await _serve(request, embeddings)


@router.post(
    "/messages",
    **_door(
        MessagesRequest,
        "Create a message (Anthropic's Messages API; anthropic and openrouter/anthropic)",
        errors={code: AnthropicErrorEnvelope for code in _ERRORS},
    ),
)
async def create_message(request: HttpRequest) -> HttpResponseBase:
    return await _serve_anthropic(request, messages)


@router.get("/models", response={200: ModelList, 401: ErrorEnvelope}, summary="List usable model ids")
async def models(request: HttpRequest, response: HttpResponse) -> dict:
    for name, value in cors.headers({k.lower(): v for k, v in request.headers.items()}).items():
        response[name] = value
    return await list_models(request.headers.get("authorization"))


@router.get("/health", response=Health, summary="Liveness", auth=None)
async def health(request: HttpRequest) -> dict:
    # This worker's spool: one that cannot be written refuses every call with a
    # daily cap (503 spend_cap_unavailable naming it), though the database is well.
    problem = services.spool_problem()
    return {"status": "degraded" if problem else "ok", "engine": "marina", "spool": problem or "ok"}


# Wrong methods on known paths: OpenAI's envelope with an Allow header (Ninja
# would answer a bare text 405), traced like every other /v1 answer.
_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")


def _preflight(request: HttpRequest) -> HttpResponse:
    """A CORS preflight: 204, no key needed (passthru/cors.py)."""
    response = HttpResponse(status=204)
    for name, value in cors.preflight({k.lower(): v for k, v in request.headers.items()}).items():
        response[name] = value
    return response


def _refuse_other_methods(path: str, allowed: str) -> None:
    async def wrong_method(request: HttpRequest) -> HttpResponseBase:
        if request.method == "OPTIONS" and settings.MARINA_CORS_ORIGINS:
            return _preflight(request)
        error = ApiError(
            405, f"Method {request.method} is not allowed on {request.path}: use {allowed}.", code="method_not_allowed"
        )
        if path == "/messages":
            return to_django(await doors.refuse(_without_body(request), error, anthropic_error, headers={"allow": allowed}))
        return to_django(await refuse(_without_body(request), error, headers={"allow": allowed}))

    router.add_api_operation(path, [m for m in _METHODS if m != allowed], wrong_method, include_in_schema=False)


for _path, _allowed in (
    ("/chat/completions", "POST"),
    ("/responses", "POST"),
    ("/embeddings", "POST"),
    ("/messages", "POST"),
    ("/models", "GET"),
    ("/health", "GET"),
):
    _refuse_other_methods(_path, _allowed)


@csrf_exempt  # an API path: no browser forms, no CSRF cookie
async def unknown_path(request: HttpRequest, rest: str = "") -> HttpResponseBase:
    """Unknown /v1 paths get OpenAI's 404 envelope, not Django's HTML page."""
    if request.method == "OPTIONS" and settings.MARINA_CORS_ORIGINS:
        return _preflight(request)
    error = ApiError(404, f"Unknown API path: {request.method} {request.path}", code="not_found")
    return to_django(await refuse(_without_body(request), error))
