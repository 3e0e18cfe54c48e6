"""The one NinjaAPI. Error classes are mapped to OpenAI's envelope here, once."""
from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import HttpError, ValidationError

from marina.benchmark_upload import router as benchmarks_router
from marina.formations_api import router as formations_router
from marina.read_api import router as read_router
from passthru.api import router as v1_router
from passthru.api import unexpected
from passthru.errors import ApiError, error_envelope
from passthru.outbound import error_out

api = NinjaAPI(
    title="Marina",
    version="1",
    description="OpenAI-compatible gateway: passthru, spend ledger, traces and formations; /api reads the ledger.",
    urls_namespace="marina-api",
    docs_url="/docs",
)
api.add_router("/v1/benchmarks", benchmarks_router)
api.add_router("/v1", v1_router)
api.add_router("/api", read_router)
api.add_router("/api", formations_router)


@api.exception_handler(ApiError)
def api_error(request: HttpRequest, exc: ApiError) -> HttpResponse:
    out = error_out(exc)
    return HttpResponse(out.body, status=out.status, content_type=out.content_type, headers=out.headers)


@api.exception_handler(ValidationError)
def validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    first = exc.errors[0] if exc.errors else {}
    param = ".".join(str(p) for p in first.get("loc", [])[1:]) or None
    return api.create_response(
        request, error_envelope(first.get("msg", "Invalid request."), "invalid_request_error", "invalid_request_error", param), status=400
    )


@api.exception_handler(HttpError)
def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    return api.create_response(
        request, ApiError(exc.status_code, str(exc)).envelope(), status=exc.status_code
    )


@api.exception_handler(Exception)
def unexpected_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    """Anything else is a bug: log it, and still answer in OpenAI's envelope."""
    out = unexpected(request.method or "", request.path, exc)
    return HttpResponse(out.body, status=out.status, content_type=out.content_type)
