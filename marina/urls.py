from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.generic import RedirectView

from marina.api import api
from passthru.errors import ApiError
from passthru.responses import error_out


def v1_fallback(request: HttpRequest, rest: str = "") -> HttpResponse:
    """Unknown /v1 paths get OpenAI's 404 envelope, not Django's HTML page."""
    out = error_out(ApiError(404, f"Unknown API path: {request.method} {request.path}", code="not_found"))
    return HttpResponse(out.body, status=out.status, content_type=out.content_type)


urlpatterns = [
    path("admin/", admin.site.urls),
    path("reports/", include("ledger.urls")),
    # Browsers ask for /favicon.ico on every admin page; answer instead of logging a 404.
    path("favicon.ico", RedirectView.as_view(url=static("ledger/favicon.svg"), permanent=True)),
    path("", api.urls),
    re_path(r"^v1/(?P<rest>.*)$", v1_fallback),
]
