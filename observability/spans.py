"""A Marina trace as OpenTelemetry spans: ids, times, kinds and attributes.

One mapping for the live export (observability/otel.py, from the TraceRecord
the ledger writer just committed) and for `manage.py export_traces`
(observability/export.py, from the stored rows), so both give every span the
same ids and attributes. Plain Python: nothing of OpenTelemetry is imported
here.

- The request is the root span (kind SERVER, named after its door,
  `POST /v1/chat/completions`, `POST /v1/responses`, `POST /v1/embeddings`,
  `POST /v1/messages`, as HTTP server spans are; a request refused on any
  other path is plain `POST`); it is not a model call, so it carries no
  `gen_ai.operation.name` and no `gen_ai.*` model attributes (its model ids are
  `marina.request.model` / `marina.response.model`): tools that count
  `gen_ai.operation.name` spans as LLM calls (Phoenix) count each call once.
  Each recorded step is a child of its `parent_seq` (or of the root). Upstream
  calls are CLIENT spans: a plain call is named `chat <upstream model>` as the
  GenAI conventions name it (`embeddings <upstream model>` on /v1/embeddings,
  with `gen_ai.operation.name=embeddings`), a formation's call `<formation>.<step>`
  (`verify.draft`, `verify.review`, `obligations+argcheck.judge`) so a trace's
  draft and review are told apart; formation steps (`verify`, ...) are
  INTERNAL spans under their names.
- Beside the GenAI attributes, OpenInference's (Arize Phoenix, Langfuse and
  others read them): `openinference.span.kind` on every span (CHAIN for the
  request and the formations, LLM for the model calls, EMBEDDING for the
  embeddings calls (with `embedding.model_name`), RETRIEVER for the
  lessons recall), and on the calls `llm.model_name`, `llm.provider` (in
  OpenInference's values: `mistralai`, not the GenAI `mistral_ai`),
  `llm.token_count.*` and `llm.cost.total`, Marina's billed cost in dollars.
  Phoenix 20.26 stores `llm.cost.total` but its own cost figures are its price
  list times the tokens (tests/e2e/test_phoenix.py).
- Ids are derived, not random: the trace id is the first 16 bytes of
  SHA-256(request id, start time in microseconds), the root's span id the
  next 8, a step's span id a hash of those and its `seq`. The start time is
  part of it because request ids repeated in ledgers written before they
  were Marina's own (a client's x-request-id was taken as the id). The same stored trace
  always gets the same ids, so an export repeated, or one after the live
  export, shows up as the same trace.
- Token usage and cost (`gen_ai.usage.*`, `llm.token_count.*`, `llm.cost.*`) sit
  on the upstream calls only, so tools that add up generations count each token
  and cent once; the root carries the request's totals as `marina.*` for dashboards.
- Message content (`gen_ai.input.messages`, `gen_ai.output.messages`) only
  with MARINA_TRACE_BODIES=on, from the bodies as stored (credentials
  redacted by kernel/redact.py before they were stored), and only on the
  upstream calls, where the conventions put it: on the root too it would
  double the largest attribute of every export.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ledger.spend.records import SpanRecord, TraceRecord

AttributeValue = str | bool | int | float | Sequence[str] | Sequence[int]

# OTLP's span kinds (opentelemetry/proto/trace/v1/trace.proto).
INTERNAL, SERVER, CLIENT = 1, 2, 3

# Marina's provider names -> the GenAI conventions' gen_ai.provider.name
# values where one exists; any other provider goes by Marina's name.
PROVIDER_NAMES = {
    "openai": "openai",
    "anthropic": "anthropic",
    "google": "gcp.gemini",
    "groq": "groq",
    "deepseek": "deepseek",
    "mistral": "mistral_ai",
    "xai": "x_ai",
}
# Marina's provider names -> OpenInference's llm.provider values (OpenInferenceLLMProviderValues:
# `mistralai`, `xai`, `google`, where the GenAI names are `mistral_ai`, `x_ai`, `gcp.gemini`);
# any other provider goes by Marina's name.
OPENINFERENCE_PROVIDERS = {
    "openai": "openai",
    "anthropic": "anthropic",
    "google": "google",
    "groq": "groq",
    "deepseek": "deepseek",
    "mistral": "mistralai",
    "xai": "xai",
    "together": "together",
    "cerebras": "cerebras",
}
# ... and the providers that have an llm.system value (OpenInferenceLLMSystemValues); the others have none.
OPENINFERENCE_SYSTEMS = {"openai": "openai", "anthropic": "anthropic", "mistral": "mistralai"}
CREW_PREFIX = "marina:"  # crews are served as marina:<name> (passthru/formations/stack.py)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ItemLink:
    """A benchmark item a trace was linked to on import (ledger/benchmarks/links.py)."""

    run_id: int
    item_id: str
    role: str


@dataclass(frozen=True)
class OtelSpan:
    trace_id: int  # 128 bits
    span_id: int  # 64 bits
    parent_id: int | None
    name: str
    kind: int  # INTERNAL, SERVER or CLIENT
    start_ns: int
    end_ns: int
    attributes: dict[str, AttributeValue]
    error: str | None = None  # the status message when the span failed; None: not an error


def unix_ns(moment: datetime) -> int:
    """Nanoseconds since the epoch, exactly (a float timestamp loses microseconds)."""
    return (moment - _EPOCH) // timedelta(microseconds=1) * 1000


def trace_ids(request_id: str, started_at: datetime) -> tuple[int, int, bytes]:
    """(trace id, root span id, seed for the steps' span ids) of one request."""
    digest = hashlib.sha256(f"{request_id}\x00{unix_ns(started_at)}".encode()).digest()
    return int.from_bytes(digest[:16]) or 1, int.from_bytes(digest[16:24]) or 1, digest


def step_span_id(seed: bytes, seq: int) -> int:
    return int.from_bytes(hashlib.blake2b(seed + seq.to_bytes(4), digest_size=8).digest()) or 1


def to_spans(trace: TraceRecord, *, bodies: bool = False, links: Sequence[ItemLink] = ()) -> list[OtelSpan]:
    """The root span of `trace` followed by one span per recorded step."""
    trace_id, root_id, seed = trace_ids(trace.request_id, trace.started_at)
    ids = {span.seq: step_span_id(seed, span.seq) for span in trace.spans}
    start = unix_ns(trace.started_at)
    spans = [
        OtelSpan(
            trace_id=trace_id,
            span_id=root_id,
            parent_id=None,
            name=_root_name(trace),
            kind=SERVER,
            start_ns=start,
            end_ns=start + round(trace.duration_ms * 1e6),
            attributes=_root_attributes(trace, links),
            error=(trace.error_message or trace.error_kind or "error") if trace.status == "error" else None,
        )
    ]
    by_seq = {step.seq: step for step in trace.spans}
    operation = EMBEDDINGS if _embeds(trace) else CHAT
    for step in trace.spans:
        step_start = unix_ns(step.started_at)
        spans.append(
            OtelSpan(
                trace_id=trace_id,
                span_id=ids[step.seq],
                parent_id=ids.get(step.parent_seq, root_id) if step.parent_seq is not None else root_id,
                name=_step_name(step, by_seq.get(step.parent_seq) if step.parent_seq is not None else None, operation),
                kind=CLIENT if step.is_upstream_call else INTERNAL,
                start_ns=step_start,
                end_ns=step_start + round(step.duration_ms * 1e6),
                attributes=_step_attributes(step, bodies, operation),
                error=(step.error_kind or "error") if step.status == "error" else None,
            )
        )
    return spans


# Marina's /v1 doors, by path, and the door each is (marina_requests_total's `door` label).
DOORS = {
    "/v1/chat/completions": "chat",
    "/v1/responses": "responses",
    "/v1/embeddings": "embeddings",
    "/v1/messages": "messages",
}
OTHER_DOOR = "other"  # a request on no door (an unknown path), refused


def door(path: str) -> str:
    return DOORS.get(path, OTHER_DOOR)


def _root_name(trace: TraceRecord) -> str:
    if trace.path not in DOORS:
        return trace.method  # a refused request on another path: HTTP's name for a span without a route
    return f"{trace.method} {trace.path}"  # HTTP's `{method} {route}`: the request, not a model call


def _embeds(trace: TraceRecord) -> bool:
    """An /v1/embeddings request: its calls are embeddings, not chats."""
    return trace.path == "/v1/embeddings"


# The GenAI conventions' gen_ai.operation.name of a model call.
CHAT, EMBEDDINGS = "chat", "embeddings"
# What a call's step is called when nothing wraps it (passthru/calls.py's default).
_PLAIN_CALL = "upstream"
_RETRIEVERS = {"lessons"}


def _step_name(step: SpanRecord, parent: SpanRecord | None, operation: str) -> str:
    """`chat <model>` (`embeddings <model>`) for a plain call; `<formation>.<step>` for a formation's call."""
    if not step.is_upstream_call:
        return step.name
    if step.name == _PLAIN_CALL:
        return f"{operation} {step.upstream_model}"
    if parent is not None and not parent.is_upstream_call and not step.name.startswith(f"{parent.name}."):
        return f"{parent.name}.{step.name}"
    return step.name


def _root_attributes(trace: TraceRecord, links: Sequence[ItemLink]) -> dict[str, AttributeValue]:
    calls = [s for s in trace.spans if s.is_upstream_call]
    attrs: dict[str, AttributeValue] = {
        "http.request.method": trace.method,
        "url.path": trace.path,
        "http.response.status_code": trace.http_status,
        "marina.request_id": trace.request_id,
        "marina.status": trace.status,
        "marina.calls": len(calls),
        "openinference.span.kind": "CHAIN",  # the request; its model calls are the LLM spans
    }
    if trace.requested_model:
        attrs["marina.request.model"] = trace.requested_model
        attrs["marina.request.stream"] = trace.stream
    answered = [s for s in calls if s.status == "ok"]
    if answered:  # the call whose answer went back (x-marina-upstream-model)
        attrs["marina.response.model"] = answered[-1].upstream_model
        attrs["marina.provider"] = answered[-1].provider
    if trace.key_name:
        attrs["marina.key_name"] = trace.key_name  # the key's name; the key itself is never in a trace
    if trace.route:
        attrs["marina.route"] = trace.route
        if trace.route != "passthru":
            attrs["marina.formation.name"] = trace.route
    if trace.formation_label:
        attrs["marina.formation.decision"] = trace.formation_label
    if trace.requested_model.startswith(CREW_PREFIX):
        attrs["marina.crew"] = trace.requested_model[len(CREW_PREFIX):]
    if trace.session:
        attrs["gen_ai.conversation.id"] = attrs["session.id"] = attrs["marina.session"] = trace.session
    if trace.error_kind:
        attrs["error.type"] = trace.error_kind
    if trace.overhead_ms is not None:
        attrs["marina.overhead_ms"] = round(trace.overhead_ms, 3)
    costs = [s.cost_nanousd for s in calls if s.cost_nanousd is not None]
    if costs:
        attrs["marina.cost_usd"] = sum(costs) / 1e9
    attrs["marina.usage.input_tokens"] = sum(s.prompt_tokens for s in calls)
    attrs["marina.usage.output_tokens"] = sum(s.completion_tokens for s in calls)
    attrs.update(_conversation_attributes(trace, links))
    return attrs


def _conversation_attributes(trace: TraceRecord, links: Sequence[ItemLink]) -> dict[str, AttributeValue]:
    """The conversation's identity (never its content) and the benchmark items the call served."""
    attrs: dict[str, AttributeValue] = {}
    if trace.conv_seed is not None:
        attrs["marina.conversation.seed"] = trace.conv_seed
    if trace.conv_opening:
        attrs["marina.conversation.opening"] = trace.conv_opening
    if trace.conv_system:
        attrs["marina.conversation.system"] = trace.conv_system
    if links:
        attrs["marina.benchmark.run_id"] = [link.run_id for link in links]
        attrs["marina.benchmark.item_id"] = [link.item_id for link in links]
        attrs["marina.benchmark.role"] = [link.role for link in links]
    return attrs


def _step_attributes(step: SpanRecord, bodies: bool, operation: str = CHAT) -> dict[str, AttributeValue]:
    attrs: dict[str, AttributeValue] = {"marina.step": step.name, "marina.status": step.status}
    if step.is_upstream_call:
        attrs.update(_call_attributes(step, operation))
    else:
        attrs["openinference.span.kind"] = "RETRIEVER" if step.name in _RETRIEVERS else "CHAIN"
    if step.http_status is not None:
        attrs["http.response.status_code"] = step.http_status
    if step.error_kind:
        attrs["error.type"] = step.error_kind
    for key, value in (step.detail or {}).items():
        # Formation decisions (verdicts, labels, rounds); never bodies.
        attrs[f"marina.detail.{key}"] = value if isinstance(value, (str, bool, int, float)) else _json(value)
    if bodies and isinstance(step.body, dict):
        if isinstance(step.body.get("request"), dict):
            _add_input(attrs, step.body["request"])
        if isinstance(step.body.get("response"), dict):
            _add_output(attrs, step.body["response"])
    return attrs


def _call_attributes(step: SpanRecord, operation: str) -> dict[str, AttributeValue]:
    """An upstream call's GenAI and OpenInference attributes."""
    provider = _provider_name(step.provider)
    attrs: dict[str, AttributeValue] = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": provider,
        "gen_ai.system": provider,  # the name before gen_ai.provider.name; many tools still read it
        "gen_ai.request.model": step.upstream_model,
        "gen_ai.usage.input_tokens": step.prompt_tokens,
        "gen_ai.usage.output_tokens": step.completion_tokens,
        "marina.provider": step.provider,
        "marina.cost_source": step.cost_source,
        # OpenInference's names for the same (openinference-semantic-conventions).
        "openinference.span.kind": "LLM",
        "llm.model_name": step.upstream_model,
        "llm.provider": OPENINFERENCE_PROVIDERS.get(step.provider, step.provider),
        "llm.token_count.prompt": step.prompt_tokens,
        "llm.token_count.completion": step.completion_tokens,
        "llm.token_count.total": step.prompt_tokens + step.completion_tokens,
    }
    if operation == EMBEDDINGS:
        # OpenInference's embedding span: Phoenix lists it as an embedding, not an LLM call.
        attrs["openinference.span.kind"] = "EMBEDDING"
        attrs["embedding.model_name"] = step.upstream_model
    if step.provider in OPENINFERENCE_SYSTEMS:
        attrs["llm.system"] = OPENINFERENCE_SYSTEMS[step.provider]
    if step.status == "ok":  # it answered (the provider's own name for it comes with the body, below)
        attrs["gen_ai.response.model"] = step.upstream_model
    if step.cached_tokens:
        attrs["gen_ai.usage.cache_read.input_tokens"] = step.cached_tokens
        attrs["llm.token_count.prompt_details.cache_read"] = step.cached_tokens
    if step.reasoning_tokens:
        attrs["gen_ai.usage.reasoning.output_tokens"] = step.reasoning_tokens
        attrs["llm.token_count.completion_details.reasoning"] = step.reasoning_tokens
    if step.cost_nanousd is not None:
        # What Marina billed (unpriced: absent, never 0), so consumers show it, not their estimate.
        attrs["marina.cost_usd"] = attrs["llm.cost.total"] = step.cost_nanousd / 1e9
    if step.ttft_ms is not None:
        attrs["gen_ai.response.time_to_first_chunk"] = step.ttft_ms / 1000
    return attrs


def _provider_name(provider: str) -> str:
    return PROVIDER_NAMES.get(provider, provider)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


# --- Message content, in the GenAI conventions' shape (role + parts) ------------


def _add_input(attrs: dict[str, AttributeValue], body: dict[str, Any]) -> None:
    messages = body.get("messages")
    if isinstance(messages, list):
        attrs["gen_ai.input.messages"] = attrs["input.value"] = _json([_message(m) for m in messages if isinstance(m, dict)])
        attrs["input.mime_type"] = "application/json"


def _add_output(attrs: dict[str, AttributeValue], payload: dict[str, Any]) -> None:
    choices = payload.get("choices")
    if not isinstance(choices, list):
        return
    out = []
    for choice in choices:
        if isinstance(choice, dict) and isinstance(choice.get("message"), dict):
            out.append({**_message(choice["message"]), "finish_reason": choice.get("finish_reason") or ""})
    attrs["gen_ai.output.messages"] = attrs["output.value"] = _json(out)
    attrs["output.mime_type"] = "application/json"
    if isinstance(payload.get("model"), str):
        attrs["gen_ai.response.model"] = payload["model"]  # what the provider says answered
    if isinstance(payload.get("id"), str):
        attrs["gen_ai.response.id"] = payload["id"]


def _message(message: dict[str, Any]) -> dict[str, Any]:
    role = str(message.get("role", ""))
    parts: list[dict[str, Any]] = []
    content = message.get("content")
    if role == "tool":
        parts.append({"type": "tool_call_response", "id": message.get("tool_call_id"), "response": content})
    elif isinstance(content, str):
        parts.append({"type": "text", "content": content})
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append({"type": "text", "content": part.get("text", "")})
            elif isinstance(part, dict):
                parts.append({"type": str(part.get("type", "unknown"))})  # images and files: their kind only
    for call in message.get("tool_calls") or ():
        if isinstance(call, dict):
            function = call.get("function")
            if not isinstance(function, dict):
                function = {}
            parts.append(
                {"type": "tool_call", "id": call.get("id"), "name": function.get("name"), "arguments": function.get("arguments")}
            )
    return {"role": role, "parts": parts}
