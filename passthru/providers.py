"""Model ids to providers.

- `<provider>/<id>` with a configured provider: that provider alone, prefix
  stripped (`openrouter/openai/gpt-5.2` is OpenRouter's `openai/gpt-5.2`);
  its answer is final, there is no silent fallback to another.
- A first-party vendor prefix without its key (`openai/gpt-4.1` with no
  OPENAI_API_KEY): the configured aggregators, in order, with the full id.
- Anything else (`gpt-4.1-mini`, `meta-llama/llama-3.1-8b`): the fallback loop
  over configured providers in MARINA_PROVIDER_ORDER, id sent as it is.
- `default`, `marina/default` (and `marina`, `marina:default`): MARINA_DEFAULT_MODEL.
- MARINA_PASSTHRU_MODEL pins every plain request to one model; formations may
  then use that model only (403 model_not_allowed).

`plan()` is for the passthru (a list of routes to try, passthru/fallback.py
tries them); `resolve()` is for formation steps, which are always served by
one named provider."""
from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from passthru.errors import ApiError

DEFAULT_IDS = frozenset({"default", "marina/default", "marina:default", "marina"})


@dataclass(frozen=True)
class Provider:
    name: str
    base_url: str
    api_key: str
    key_env: str
    keyless_ok: bool = False

    @property
    def configured(self) -> bool:
        return bool(self.api_key) or self.keyless_ok


@dataclass(frozen=True)
class Route:
    provider: Provider
    upstream_model: str

    @property
    def served_id(self) -> str:
        return f"{self.provider.name}/{self.upstream_model}"


@dataclass(frozen=True)
class Plan:
    """The routes to try for one request. With `fallback` off the first
    route's answer is final, whatever it is."""

    requested: str
    routes: tuple[Route, ...]
    fallback: bool = False


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


def _first_party(name: str) -> bool:
    return name in settings.BUILTIN_PROVIDERS and name not in settings.MARINA_AGGREGATORS


def _in_order(known: dict[str, Provider], *, only: tuple[str, ...] | None = None) -> list[Provider]:
    names = [n for n in settings.MARINA_PROVIDER_ORDER if only is None or n in only]
    return [known[n] for n in names if n in known and known[n].configured]


def _not_configured(provider: Provider, *, aggregators_too: bool = False) -> ApiError:
    also = ""
    if aggregators_too:
        also = f", or a key of an aggregator ({', '.join(settings.MARINA_AGGREGATORS)}) to reach it through one"
    return ApiError(
        503,
        f"Provider '{provider.name}' has no API key: set {provider.key_env}{also}.",
        code="provider_not_configured",
        error_type="server_error",
    )


def _explicit(model_id: str, *, setting: str) -> Route:
    """The operator's own `<provider>/<id>` (MARINA_DEFAULT_MODEL or the pin): that provider only."""
    known = providers()
    prefix, _, upstream_model = model_id.partition("/")
    provider = known.get(prefix)
    if provider is None or not upstream_model:
        raise ApiError(
            503,
            f"{setting}='{model_id}' is not a <provider>/<model id> of a known provider.",
            code="provider_not_configured",
            error_type="server_error",
        )
    if not provider.configured:
        raise ApiError(
            503,
            f"The upstream of {setting} ('{model_id}') is not configured: set {provider.key_env}.",
            code="provider_not_configured",
            error_type="server_error",
        )
    return Route(provider, upstream_model)


def _default_route() -> Route:
    if settings.MARINA_PASSTHRU_MODEL:
        return _explicit(settings.MARINA_PASSTHRU_MODEL, setting="MARINA_PASSTHRU_MODEL")
    if settings.MARINA_DEFAULT_MODEL:
        return _explicit(settings.MARINA_DEFAULT_MODEL, setting="MARINA_DEFAULT_MODEL")
    raise ApiError(
        404,
        "The model 'default' is not set up on this server: the operator sets MARINA_DEFAULT_MODEL "
        "to a <provider>/<model id>.",
        code="model_not_found",
        param="model",
    )


def plan(model_id: str) -> Plan:
    """The routes to try for a plain passthru request, in order."""
    if settings.MARINA_PASSTHRU_MODEL:  # the pin overrides whatever was asked
        return Plan(model_id, (_default_route(),))
    model_id = settings.MARINA_MODEL_ALIASES.get(model_id, model_id)
    if model_id in DEFAULT_IDS:
        return Plan(model_id, (_default_route(),))
    known = providers()
    prefix, sep, upstream_model = model_id.partition("/")
    provider = known.get(prefix) if sep and upstream_model else None
    if provider is not None:
        if provider.configured:
            return Plan(model_id, (Route(provider, upstream_model),))
        if _first_party(provider.name):
            routes = tuple(Route(p, model_id) for p in _in_order(known, only=settings.MARINA_AGGREGATORS))
            if routes:
                return Plan(model_id, routes, fallback=True)
            raise _not_configured(provider, aggregators_too=True)
        raise _not_configured(provider)
    routes = tuple(Route(p, model_id) for p in _in_order(known))
    if not routes:
        raise ApiError(
            503,
            f"No provider can serve '{model_id}': none is configured. Set a provider's key "
            "(e.g. OPENROUTER_API_KEY), or use <provider>/<model id>.",
            code="provider_not_configured",
            error_type="server_error",
        )
    return Plan(model_id, routes, fallback=True)


def resolve(model_id: str) -> Route:
    """One provider and upstream id for a formation step (no fallback loop).

    Aliases (MARINA_MODEL_ALIASES) resolve first; `default` is the operator's
    default (or the pin). Under a passthru pin any other id is 403
    model_not_allowed. Unknown prefix -> 404 model_not_found; a provider without
    its key -> 503 naming the variable (a first-party vendor's id goes to the
    first configured aggregator instead)."""
    pin = settings.MARINA_PASSTHRU_MODEL
    model_id = settings.MARINA_MODEL_ALIASES.get(model_id, model_id)
    if pin and model_id not in DEFAULT_IDS and model_id != pin:
        raise ApiError(
            403,
            f"The model '{model_id}' is not allowed here: this server pins every call to "
            f"MARINA_PASSTHRU_MODEL ('{pin}'); use 'default' or that id.",
            code="model_not_allowed",
            param="model",
        )
    if model_id in DEFAULT_IDS:
        return _default_route()
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
    if provider.configured:
        return Route(provider, upstream_model)
    if _first_party(provider.name):
        aggregators = _in_order(known, only=settings.MARINA_AGGREGATORS)
        if aggregators:
            return Route(aggregators[0], model_id)
        raise _not_configured(provider, aggregators_too=True)
    raise _not_configured(provider)
