"""Every /api answer is JSON: Django's own HTML 404 (an unknown /api path) and
Ninja's text 405 (a wrong method on a known one) become OpenAI's error envelope,
as /v1's do (passthru/api.py) and as docs/api.md promises. A middleware, so a
path or method nobody routed cannot slip past it."""
from __future__ import annotations

import json
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBase

from passthru.errors import ApiError

_PREFIX = "/api/"


def _is_api(path: str) -> bool:
    return path == "/api" or path.startswith(_PREFIX)


def _is_json(response: HttpResponseBase) -> bool:
    return response.get("Content-Type", "").split(";")[0].strip() == "application/json"


def _replacement(request: HttpRequest, response: HttpResponseBase) -> ApiError:
    where = f"{request.method} {request.path}"
    if response.status_code == 404:
        return ApiError(404, f"Unknown API path: {where} (see /docs and docs/api.md)", code="not_found")
    if response.status_code == 405:
        allowed = response.get("Allow", "GET")
        return ApiError(405, f"Method {request.method} is not allowed on {request.path}: use {allowed}.",
                        code="method_not_allowed", headers={"Allow": allowed})  # fmt: skip
    return ApiError(response.status_code, f"{where} failed ({response.status_code})")


class ApiEnvelopeMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if response.status_code < 400 or not _is_api(request.path) or _is_json(response):
            return response
        error = _replacement(request, response)
        answer = HttpResponse(json.dumps(error.envelope()), status=error.status, content_type="application/json")
        for name, value in (error.headers or {}).items():
            answer[name] = value
        return answer
