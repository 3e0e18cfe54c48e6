"""Which /v1 doors serve a model id, for GET /v1/models (each card's `endpoints`).

A door is listed only where a call would be routed, and read from the same
rules the doors route by: /v1/messages needs a provider with Anthropic's
Messages API (doors/messages.py SPEAKERS), /v1/embeddings one with an
embeddings API (doors/embeddings.py). What a provider cannot tell Marina in
advance, whether a model embeds or chats, is read from its name: an id with
`embed` in its model name (`text-embedding-3-small`, `mistral-embed`,
`gemini-embedding-001`) is listed for embeddings and not for chat or
responses, any other id the other way round."""
from __future__ import annotations

from passthru import providers
from passthru.doors.common import asks_for_formation
from passthru.doors.embeddings import embeds
from passthru.doors.messages import SPEAKERS
from passthru.errors import ApiError
from passthru.providers import Plan, Route

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
EMBEDDINGS = "/v1/embeddings"
MESSAGES = "/v1/messages"


def endpoints(model_id: str) -> list[str]:
    """Formations and crews run on chat completions only. A plain id is
    listed on chat and responses (native or translated: every provider
    serves one or the other) unless it names an embedding model; on
    embeddings if it does and a provider with an embeddings API serves it;
    on /v1/messages when a provider with Anthropic's Messages API serves an
    Anthropic model under it (anthropic/…, openrouter/anthropic/…, or a bare
    claude-… id with Anthropic configured)."""
    try:
        chat_only = asks_for_formation(model_id, {})
    except ApiError:  # a mistyped marina/… prefix: chat's 400 says what is wrong
        return [CHAT]
    if chat_only:
        return [CHAT]
    try:
        plan = providers.plan(model_id)
    except ApiError:
        return [CHAT]
    embedding = any(embedding_model(r.upstream_model) for r in plan.routes)
    doors = [] if embedding else [CHAT, RESPONSES]
    if embedding and any(embeds(r) for r in plan.routes):
        doors.append(EMBEDDINGS)
    if not embedding and any(_speaks_messages(r, plan) for r in plan.routes):
        doors.append(MESSAGES)
    return doors


def embedding_model(upstream_model: str) -> bool:
    return "embed" in upstream_model.rpartition("/")[2].lower()


def _speaks_messages(route: Route, plan: Plan) -> bool:
    if route.provider.name not in SPEAKERS:
        return False
    if route.upstream_model.startswith("anthropic/"):
        return True
    # anthropic/<model> is the caller's word for it; a bare id is tried on Anthropic among the others.
    return route.provider.name == "anthropic" and (not plan.fallback or route.upstream_model.startswith("claude"))
