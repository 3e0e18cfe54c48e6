"""Plain records that passthru hands to the ledger after a request: the one
shape crossing the app boundary (passthru never touches ledger models)."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass
class SpanRecord:
    seq: int
    name: str
    started_at: datetime
    duration_ms: float = 0.0
    parent_seq: int | None = None
    provider: str = ""
    upstream_model: str = ""
    status: str = "ok"
    http_status: int | None = None
    error_kind: str = ""
    ttft_ms: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cost_nanousd: int | None = None
    cost_source: str = "none"
    detail: dict[str, Any] = field(default_factory=dict)
    body: Any = None

    @property
    def is_upstream_call(self) -> bool:
        return bool(self.provider)


@dataclass
class TraceRecord:
    request_id: str  # Marina's own, unique
    started_at: datetime
    path: str
    method: str = "POST"
    duration_ms: float = 0.0
    overhead_ms: float | None = None
    key_name: str = ""
    requested_model: str = ""
    route: str = ""
    formation_label: str = ""
    session: str = ""
    stream: bool = False
    status: str = "ok"
    http_status: int = 200
    error_kind: str = ""
    error_message: str = ""
    body: Any = None
    spans: list[SpanRecord] = field(default_factory=list)
    # The conversation's identity, never its content (kernel/conversation.py).
    conv_seed: int | None = None
    conv_opening: str = ""
    conv_system: str = ""
    client_request_id: str = ""  # the client's x-request-id, if it sent one
    # The provider's id of a Responses answer (its span's detail["response_id"]):
    # which key made it, for the next call's previous_response_id (passthru/response_owners.py).
    response_id: str = ""

    @property
    def upstream_cost_nanousd(self) -> int:
        """What the trace adds to spend_daily: its upstream calls' cost."""
        return sum(span.cost_nanousd or 0 for span in self.spans if span.is_upstream_call)
