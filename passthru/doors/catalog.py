"""Which /v1 doors serve a model id, for GET /v1/models (each card's `endpoints`)."""
from __future__ import annotations

from passthru import crews, formations, providers
from passthru.doors.messages import SPEAKERS
from passthru.errors import ApiError

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
EMBEDDINGS = "/v1/embeddings"
MESSAGES = "/v1/messages"


def endpoints(model_id: str) -> list[str]:
    """Formations and crews run on chat completions only. A plain id is
    served on chat, responses (native or translated) and embeddings (if the
    model embeds: the provider decides), and on /v1/messages when a provider
    with Anthropic's Messages API serves it (anthropic/…, openrouter/anthropic/…)."""
    if crews.is_crew_id(model_id) or formations.find(model_id):
        return [CHAT]
    try:
        routes = providers.plan(model_id).routes
    except ApiError:
        return [CHAT]
    doors = [CHAT, RESPONSES, EMBEDDINGS]
    if any(
        r.provider.name in SPEAKERS and (r.provider.name == "anthropic" or r.upstream_model.startswith("anthropic/"))
        for r in routes
    ):
        doors.append(MESSAGES)
    return doors
