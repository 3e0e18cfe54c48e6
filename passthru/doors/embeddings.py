"""POST /v1/embeddings: passed through to the model's provider, metered from
the reply's `usage` (prompt tokens, priced from the same tables as chat, or
the provider's own `usage.cost`) and traced. The input is stored in the
trace only with MARINA_TRACE_BODIES=on, as chat's bodies are."""
from __future__ import annotations

from typing import Any

from passthru.context import Inbound, RequestContext
from passthru.doors import common
from passthru.endpoints import Endpoint, chat_usage, with_model
from passthru.errors import ApiError
from passthru.outbound import Outbound
from passthru.providers import Plan, Route, plan
from passthru.streaming import Meter

# Providers whose API has no /embeddings (Anthropic points to Voyage; Groq,
# Cerebras, DeepSeek and xAI serve chat models only): never sent an embeddings
# call, and no id of theirs lists this door (GET /v1/models). Every other
# provider, a local server included, may embed: the provider decides.
WITHOUT_EMBEDDINGS = frozenset({"anthropic", "cerebras", "deepseek", "groq", "xai"})

# Embeddings have no stream: the meter is never used.
EMBEDDINGS = Endpoint("embeddings", with_model, chat_usage, lambda route, span, hide: Meter(route, span, hide_usage_chunk=hide))


async def embeddings(inbound: Inbound) -> Outbound:
    return await common.serve(inbound, _embed)


async def _embed(ctx: RequestContext, body: dict[str, Any]) -> Outbound:
    if not _embeddable(body.get("input")):
        raise ApiError(
            400, "'input' is required: a string, or an array of strings, of token ids or of token id arrays.", param="input"
        )
    if body.get("stream"):
        raise ApiError(400, "Embeddings are not streamed: drop 'stream'.", param="stream")
    ctx.route = "passthru"
    route, done = await common.first_json(ctx, embedding_plan(body["model"]), body, EMBEDDINGS)
    return common.plain_out(route, done)


def embedding_plan(model: str) -> Plan:
    """The model's plan without the providers that do not embed; a 400 when none is left."""
    routes = plan(model)
    kept = tuple(r for r in routes.routes if embeds(r))
    if not kept:
        raise ApiError(
            400,
            f"The model '{model}' is not served by a provider with an embeddings API "
            f"({', '.join(sorted(WITHOUT_EMBEDDINGS))} have none): use an embedding model's <provider>/<model>.",
            param="model",
        )
    return Plan(routes.requested, kept, routes.fallback)


def embeds(route: Route) -> bool:
    return route.provider.name not in WITHOUT_EMBEDDINGS


def _embeddable(value: Any) -> bool:
    """What passthru/schemas.py's EmbeddingsRequest allows as `input`."""
    if isinstance(value, str):
        return True
    if not isinstance(value, list):
        return False
    return (
        all(isinstance(v, str) for v in value)
        or all(common.is_int(v) for v in value)
        or all(isinstance(v, list) and all(common.is_int(t) for t in v) for v in value)
    )
