"""What the /v1 core answers, independent of the web framework that sends it."""
from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from passthru.errors import ApiError

JSON = "application/json"
SSE = "text/event-stream"


@dataclass
class Outbound:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    content_type: str = JSON
    stream: AsyncIterator[bytes] | None = None  # set for SSE replies; body is then unused


def json_out(status: int, payload: Any, headers: dict[str, str] | None = None) -> Outbound:
    return Outbound(status, dict(headers or {}), json.dumps(payload, ensure_ascii=False).encode())


def error_out(exc: ApiError) -> Outbound:
    return json_out(exc.status, exc.envelope(), exc.headers)
