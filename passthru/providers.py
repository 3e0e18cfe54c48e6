"""Model ids to providers: `openrouter/openai/gpt-5.2` is OpenRouter's `openai/gpt-5.2`.

A named provider answers alone; there is no silent fallback to another."""
from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from passthru.errors import ApiError


@dataclass(frozen=True)
class Provider:
    name: str
    base_url: str
    api_key: str
    key_env: str
    keyless_ok: bool = False


@dataclass(frozen=True)
class Route:
    provider: Provider
    upstream_model: str

    @property
    def served_id(self) -> str:
        return f"{self.provider.name}/{self.upstream_model}"


def providers() -> dict[str, Provider]:
    return {
        name: Provider(
            name=name,
            base_url=conf["base_url"],
            api_key=conf["api_key"],
            key_env=conf["key_env"],
            keyless_ok=bool(conf.get("keyless_ok")),
        )
        for name, conf in settings.MARINA_PROVIDERS.items()
    }


def resolve(model_id: str) -> Route:
    """The provider and upstream id for an explicit `<provider>/<id>` model id.

    Aliases (MARINA_MODEL_ALIASES) resolve first. Unknown prefix -> 404
    model_not_found; a provider without its key -> 503 naming the variable."""
    model_id = settings.MARINA_MODEL_ALIASES.get(model_id, model_id)
    known = providers()
    prefix, sep, upstream_model = model_id.partition("/")
    provider = known.get(prefix)
    if not sep or provider is None or not upstream_model:
        raise ApiError(
            404,
            f"The model '{model_id}' does not exist: use <provider>/<model id>, "
            f"with a provider among {', '.join(sorted(known))}.",
            code="model_not_found",
            param="model",
        )
    if not provider.api_key and not provider.keyless_ok:
        raise ApiError(
            503,
            f"Provider '{provider.name}' has no API key: set {provider.key_env}.",
            code="provider_not_configured",
            error_type="server_error",
        )
    return Route(provider, upstream_model)
