"""What an upstream call needs to know of the API it speaks, for passthru/calls.py.

Chat completions is one upstream endpoint; /v1/responses, /v1/embeddings and
/v1/messages (passthru/doors/) are others. Each differs from chat in four
things only, named here: the path under the provider's base URL, the body the
provider gets, where the reply's usage is, and how a stream reports it. The
call itself (cap hold, span, drain, pricing) is calls.py's, one way for all."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ledger.spend.records import SpanRecord
from passthru.bodyprep import prepare
from passthru.pricing import Usage, price, usage_from
from passthru.providers import Route
from passthru.streaming import Meter
from passthru.upstream import CHAT as CHAT_PATH


def chat_usage(route: Route, payload: dict[str, Any]) -> Usage:
    """The priced usage of a chat completion (or of an embeddings reply: the same `usage` shape)."""
    reported = payload.get("usage")
    usage = usage_from(reported) or Usage()
    price(usage, provider=route.provider.name, upstream_model=route.upstream_model, reported=reported)
    return usage


def with_model(route: Route, body: dict[str, Any]) -> dict[str, Any]:
    """The client's body with the upstream id: all a native door changes."""
    return {**body, "model": route.upstream_model}


@dataclass(frozen=True)
class Endpoint:
    path: str
    # The body this provider gets (a new dict).
    prepare: Callable[[Route, dict[str, Any]], dict[str, Any]]
    # A 2xx JSON reply's usage, priced.
    usage: Callable[[Route, dict[str, Any]], Usage]
    # The stream's meter: (route, span, hide_usage_chunk) -> Meter.
    meter: Callable[[Route, SpanRecord, bool], Meter]
    # Chat streams report usage only when asked (stream_options.include_usage);
    # the other APIs always do.
    asks_for_usage: bool = False
    # The body as the daily cap's estimate reads it (passthru/spendcap.py looks
    # for max_tokens / max_completion_tokens): an API that names its limit
    # otherwise maps it here.
    cap_view: Callable[[dict[str, Any]], dict[str, Any]] | None = None


def _chat_meter(route: Route, span: SpanRecord, hide: bool) -> Meter:
    return Meter(route, span, hide_usage_chunk=hide)


CHAT = Endpoint(CHAT_PATH, prepare, chat_usage, _chat_meter, asks_for_usage=True)
