"""Per-request state: who called, what was asked, and the spans collected
on the way. Turned into one ledger.spend.records.TraceRecord at the end."""
from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from kernel.conversation import NONE as NO_IDENTITY
from kernel.conversation import Identity
from ledger.spend.records import SpanRecord, TraceRecord
from passthru.errors import ApiError

if TYPE_CHECKING:
    from passthru.auth import Caller
    from passthru.spendcap import Hold

_CLIENT_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,64}$")


def new_request_id() -> str:
    """Marina's trace id: unique (Trace.request_id is), whatever clients send."""
    return f"req-{uuid.uuid4().hex}"


@dataclass
class Inbound:
    """An HTTP request as the /v1 core sees it, independent of the framework."""

    method: str
    path: str
    headers: Mapping[str, str]  # lower-case names
    body: bytes
    peer: str = ""  # the client's socket address (IP), for per-IP rate limits
    caller: Caller | None = None  # set when the edge checked the key before reading the body

    def take_body(self) -> bytes:
        """The body, handed over once: the door parses it and keeps no copy
        (a stream may wait minutes for its first byte; docs/performance.md)."""
        body, self.body = self.body, b""
        return body


@dataclass
class RequestContext:
    inbound: Inbound
    request_id: str
    client_request_id: str = ""  # the client's x-request-id (two clients may send the same)
    started: float = field(default_factory=time.perf_counter)
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    key_name: str = ""
    requested_model: str = ""
    route: str = ""
    formation_label: str = ""
    session: str = ""
    stream: bool = False
    upstream_seconds: float = 0.0  # time spent waiting on providers, for x-marina-overhead-ms
    spans: list[SpanRecord] = field(default_factory=list)
    body: Any = None
    conversation: Identity = NO_IDENTITY
    traced: bool = False  # its trace has gone to the ledger (one trace per request)
    # A stream its client abandoned, still read (and metered) in the background
    # (passthru/calls.py _drain): its trace waits for it.
    draining: asyncio.Task[None] | None = None
    # The daily cap's holds on this request's upstream calls (passthru/spendcap.py),
    # released once its trace, and so its spend, is recorded.
    holds: list[Hold] = field(default_factory=list)

    @classmethod
    def for_request(cls, inbound: Inbound) -> RequestContext:
        offered = inbound.headers.get("x-request-id", "")
        return cls(
            inbound=inbound,
            request_id=new_request_id(),
            client_request_id=offered if _CLIENT_ID.match(offered) else "",
            session=inbound.headers.get("x-marina-session", "")[:128],
        )

    def upstream_headers(self) -> dict[str, str]:
        """Headers forwarded to providers: the client's, with our request id."""
        return {**self.inbound.headers, "x-request-id": self.request_id}

    def open_span(self, name: str, *, parent_seq: int | None = None, **values: Any) -> SpanRecord:
        span = SpanRecord(
            seq=len(self.spans), name=name, parent_seq=parent_seq, started_at=datetime.now(UTC), **values
        )
        self.spans.append(span)
        return span

    @contextmanager
    def timed_span(self, name: str, *, parent_seq: int | None = None) -> Iterator[SpanRecord]:
        """A span around a formation's steps: its duration, and the error kind when an ApiError ends them."""
        span = self.open_span(name, parent_seq=parent_seq)
        started = time.perf_counter()
        try:
            yield span
        except ApiError as exc:
            span.status = "error"
            span.error_kind = exc.trace_kind
            raise
        finally:
            span.duration_ms = (time.perf_counter() - started) * 1000

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000

    def overhead_ms(self) -> float:
        return max(0.0, self.elapsed_ms() - self.upstream_seconds * 1000)

    def trace(self, *, http_status: int, status: str, error_kind: str = "", error_message: str = "") -> TraceRecord:
        return TraceRecord(
            request_id=self.request_id,
            client_request_id=self.client_request_id,
            started_at=self.started_at,
            path=self.inbound.path,
            method=self.inbound.method,
            duration_ms=self.elapsed_ms(),
            overhead_ms=self.overhead_ms(),
            key_name=self.key_name,
            requested_model=self.requested_model,
            route=self.route,
            formation_label=self.formation_label,
            session=self.session,
            stream=self.stream,
            status=status,
            http_status=http_status,
            error_kind=error_kind,
            error_message=error_message,
            body=self.body,
            spans=self.spans,
            conv_seed=self.conversation.seed,
            conv_opening=self.conversation.opening,
            conv_system=self.conversation.system,
            response_id=next((s.detail["response_id"] for s in self.spans if s.detail and "response_id" in s.detail), ""),
        )
