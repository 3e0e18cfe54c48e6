"""GET /metrics: Prometheus' text format. With MARINA_METRICS_TOKEN set, a
scrape must send `Authorization: Bearer <token>`; without it, only loopback
clients are answered (a Prometheus on the same host, or an SSH tunnel).

Loopback means the client's address as MARINA_TRUSTED_PROXIES reads it, not
the socket's peer: behind a proxy on the same host the peer is always
127.0.0.1. uvicorn resolves the CIDR form before Marina sees the request, but
the count form is Marina's own (kernel/proxies.py), and /metrics once
answered a forwarded outside client with every key's tokens and dollars."""
from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from kernel import proxies
from observability import metrics


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _client(request: HttpRequest) -> str:
    headers = {name.lower(): value for name, value in request.headers.items()}
    return proxies.client_address(request.META.get("REMOTE_ADDR", ""), headers, proxies.parse(settings.MARINA_TRUSTED_PROXIES))


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    token = settings.MARINA_METRICS_TOKEN
    if token:
        offered = request.headers.get("authorization", "")
        if not hmac.compare_digest(offered.encode(), f"Bearer {token}".encode()):
            response = HttpResponse("Send Authorization: Bearer <MARINA_METRICS_TOKEN>.\n", status=401, content_type="text/plain")
            response["WWW-Authenticate"] = "Bearer"
            return response
    elif not _loopback(_client(request)):
        return HttpResponse(
            "/metrics answers loopback clients only; set MARINA_METRICS_TOKEN to scrape from elsewhere.\n",
            status=403,
            content_type="text/plain",
        )
    return HttpResponse(metrics.render(), content_type=CONTENT_TYPE_LATEST)
