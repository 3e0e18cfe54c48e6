"""GET /metrics: Prometheus' text format. With MARINA_METRICS_TOKEN set, a
scrape must send `Authorization: Bearer <token>`; without it, only loopback
clients are answered (a Prometheus on the same host, or an SSH tunnel)."""
from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from observability import metrics


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    token = settings.MARINA_METRICS_TOKEN
    if token:
        offered = request.headers.get("authorization", "")
        if not hmac.compare_digest(offered.encode(), f"Bearer {token}".encode()):
            response = HttpResponse("Send Authorization: Bearer <MARINA_METRICS_TOKEN>.\n", status=401, content_type="text/plain")
            response["WWW-Authenticate"] = "Bearer"
            return response
    elif not _loopback(request.META.get("REMOTE_ADDR", "")):
        return HttpResponse(
            "/metrics answers loopback clients only; set MARINA_METRICS_TOKEN to scrape from elsewhere.\n",
            status=403,
            content_type="text/plain",
        )
    return HttpResponse(metrics.render(), content_type=CONTENT_TYPE_LATEST)
