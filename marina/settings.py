"""Marina's one settings file. Every deploy-time value is read from the
environment or from .env (see .env.example for the full list); defaults suit local
development: SQLite in the project root, the API closed until keys are set."""
from __future__ import annotations

import sys
from ipaddress import ip_address
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from kernel import proxies as _proxies
from kernel.env import (
    ConfigError,
    env_bool,
    env_choice,
    env_float,
    env_int,
    env_log_level,
    env_money_or_off,
    env_pairs,
    env_secret,
    env_str,
    load_env_file,
)

BASE_DIR = Path(__file__).resolve().parent.parent
load_env_file(BASE_DIR / ".env")  # .env in the project root (or MARINA_ENV_FILE); the environment wins over it

SECRET_KEY = env_secret("MARINA_SECRET_KEY") or "dev-only-not-secret-change-me"
# Earlier secrets (whitespace-separated), still accepted: sessions, and formation state sealed under them (docs/security.md).
SECRET_KEY_FALLBACKS = env_secret("MARINA_SECRET_KEY_FALLBACKS").split()
DEBUG = env_bool("MARINA_DEBUG", False)
ALLOWED_HOSTS = env_str("MARINA_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]").split(",")
CSRF_TRUSTED_ORIGINS = [o for o in env_str("MARINA_CSRF_TRUSTED_ORIGINS").split(",") if o]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_tables2",
    "ninja",
    "passthru",
    "ledger",
    "observability",
    "repro",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "marina.api_envelope.ApiEnvelopeMiddleware",  # /api's 404s and 405s in the JSON envelope, not HTML
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "marina.urls"
ASGI_APPLICATION = "marina.asgi.application"
WSGI_APPLICATION = "marina.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database ---------------------------------------------------------------
# SQLite (a file in the project root) is the embedded default; DATABASE_URL
# (postgres://...) is how several processes and hosts share one ledger.
DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL") or f"sqlite:///{BASE_DIR / 'marina.db'}",
        conn_max_age=None,  # ledger writes run on one long-lived thread per process
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {
        # WAL lets readers (reports) run beside the writer; IMMEDIATE takes the
        # write lock up front so concurrent writers wait (busy timeout) instead
        # of failing with "database is locked" on lock upgrade.
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
    }
    # A file, not :memory:, so the live-server and ledger threads in tests see
    # the same database as the test itself.
    DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / "test-marina.sqlite3")}
    # django_tables2 tries django.contrib.postgres when it is imported (its
    # JSONColumn also renders HStoreField), and that loads psycopg and libpq:
    # 9.8 MB in every worker of a SQLite install, for a field no SQLite table
    # has. Marked missing, the import fails as it does where psycopg is not
    # installed, which django_tables2 expects (docs/performance.md).
    sys.modules.setdefault("django.contrib.postgres.fields", None)  # type: ignore[arg-type]

if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Django turns prepared statements off for the sake of connection poolers;
    # Marina prepares the statements it runs on every call (kernel/prepared.py:
    # the trace write, the spend cap, the rate limiter). Django's own queries
    # bind on the client and are never prepared either way. `false` for a
    # pooler in transaction mode without prepared-statement support (PgBouncer
    # before 1.21, or without max_prepared_statements).
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = (
        5 if env_bool("MARINA_PG_PREPARED_STATEMENTS", True) else None
    )

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
# Static files are served by whitenoise straight from the app and static/
# folders (finders), so no collectstatic step is needed; a collected
# STATIC_ROOT is used only when one exists.
STATIC_ROOT = BASE_DIR / "staticfiles" if (BASE_DIR / "staticfiles").is_dir() else None
STATICFILES_DIRS = [BASE_DIR / "static"] if (BASE_DIR / "static").is_dir() else []
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True  # serve static files without a collectstatic step

LOGIN_URL = "/admin/login/"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_log_level().upper()},
    # httpx logs every request line at INFO; keep the gateway's log quiet.
    "loggers": {"httpx": {"level": "WARNING"}, "httpcore": {"level": "WARNING"}},
}

# --- The /v1 model API -------------------------------------------------------
# MODEL_API_KEYS: comma list of `secret` or `secret:name`. Only names (or a
# short hash of a nameless key) ever leave this module's settings.
MODEL_API_KEYS = env_secret("MODEL_API_KEYS")
# A key's name never holds `/`: that is what separates an operator key's name
# from the callers it names (`secret:ops/*` -> `ops/<agent>`, passthru/auth.py).
for _entry in MODEL_API_KEYS.split(","):
    _key_name = _entry.partition(":")[2].strip()
    if "/" in _key_name.removesuffix("/*") or _key_name == "/*":
        raise ConfigError(f"MODEL_API_KEYS: a key name may not contain '/' (only an operator key's `name/*`), not {_key_name!r}")
MARINA_OPEN_API = env_str("MARINA_OPEN_API") == "true"  # exactly "true", as in the reference

MARINA_MAX_REQUEST_BYTES = env_int("MARINA_MAX_REQUEST_BYTES", 8 * 1024 * 1024, minimum=1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = MARINA_MAX_REQUEST_BYTES + 1024
# POST /v1/benchmarks/runs (marina/benchmark_upload.py): its own, larger body cap,
# and whether an open API (MARINA_OPEN_API, no keys) may file runs at all.
MARINA_MAX_UPLOAD_BYTES = env_int("MARINA_MAX_UPLOAD_BYTES", 50 * 1024 * 1024, minimum=1024)
MARINA_OPEN_API_UPLOADS = env_bool("MARINA_OPEN_API_UPLOADS", False)
# Upstream timeouts (passthru/upstream.py). MARINA_UPSTREAM_TIMEOUT is the idle
# timeout: the longest wait for the first byte of an answer and between two
# bytes, plain or streamed. MARINA_UPSTREAM_DEADLINE bounds a non-streamed call
# in all (a provider trickling bytes resets the idle timeout); streams have no
# deadline, as long answers are what they are for.
MARINA_UPSTREAM_TIMEOUT = env_float("MARINA_UPSTREAM_TIMEOUT", 600.0, minimum=0.001)
MARINA_UPSTREAM_DEADLINE = env_float("MARINA_UPSTREAM_DEADLINE", 600.0, minimum=0.001)
MARINA_UPSTREAM_CONNECT_TIMEOUT = env_float("MARINA_UPSTREAM_CONNECT_TIMEOUT", 10.0, minimum=0.001)
# Connections one worker may hold open to one provider (passthru/wire.py's
# pool), and how long a call waits for one to free before a 503. A streamed
# call holds its connection from the request to [DONE] (minutes for a
# reasoning model). The default, 0, sets no number of its own: the pool takes
# what the worker's file-descriptor limit leaves room for (passthru/upstream.py;
# gunicorn.conf.py raises that limit to its hard limit). A fixed default (4096
# until 2026-12-06) queued the calls of a 10,000-stream burst past it for a
# whole stream's length (docs/performance.md); a number set here is kept when
# it fits in that room.
MARINA_UPSTREAM_MAX_CONNECTIONS = env_int("MARINA_UPSTREAM_MAX_CONNECTIONS", 0, minimum=0)
MARINA_UPSTREAM_POOL_TIMEOUT = env_float("MARINA_UPSTREAM_POOL_TIMEOUT", 60.0, minimum=0.001)
# Calls (POSTs to /v1's doors) one worker works on at once before their provider has them
# (passthru/admission.py): the rest wait their turn, in the order they came,
# so that a burst reaches its providers as it arrives. 0: no limit.
MARINA_INTAKE_TURNS = env_int("MARINA_INTAKE_TURNS", 64)
MARINA_DAILY_SPEND_CAP_USD = env_money_or_off("MARINA_DAILY_SPEND_CAP_USD", "50")
# A client that leaves before the end: seconds to let its upstream call run on
# (in the background) so that the usage the provider reports is metered; then
# Marina hangs up. 0 hangs up at once (the call is then not priced).
MARINA_DRAIN_AFTER_DISCONNECT_SECONDS = env_float("MARINA_DRAIN_AFTER_DISCONNECT_SECONDS", 5.0, minimum=0.0)
# The completion a call is assumed to produce when it sets no max_tokens /
# max_completion_tokens, for the estimate the daily cap holds while it runs
# (passthru/spendcap.py).
MARINA_SPEND_CAP_COMPLETION_TOKENS = env_int("MARINA_SPEND_CAP_COMPLETION_TOKENS", 1024, minimum=1)
# What the cap does when neither the database nor this process's lease can
# say there is room: `refuse` (503 spend_cap_unavailable, Retry-After) or `allow`.
MARINA_SPEND_CAP_ON_DB_ERROR = env_str("MARINA_SPEND_CAP_ON_DB_ERROR", "refuse").lower()
if MARINA_SPEND_CAP_ON_DB_ERROR not in ("refuse", "allow"):
    raise ImproperlyConfigured(
        f"MARINA_SPEND_CAP_ON_DB_ERROR={MARINA_SPEND_CAP_ON_DB_ERROR!r}: expected 'refuse' or 'allow'"
    )
# The ledger's spool (ledger/spend/spool.py): traces the database could not
# take wait in a journal per process under this directory until it can; each
# journal is bounded by MARINA_SPOOL_MAX_BYTES.
MARINA_SPOOL_DIR = env_str("MARINA_SPOOL_DIR") or str(BASE_DIR / "var" / "spool")
MARINA_SPOOL_MAX_BYTES = env_int("MARINA_SPOOL_MAX_BYTES", 256 << 20, minimum=4096)
# Below this (the spool's HEADROOM_BYTES for calls in flight, and room for
# records beside it: ledger/spend/spool.py MIN_MAX_BYTES) the daily cap would
# refuse every call at once.
if MARINA_SPOOL_MAX_BYTES < (288 << 10):
    raise ConfigError(
        f"MARINA_SPOOL_MAX_BYTES must be at least {288 << 10} (256 KiB kept for the calls in flight and room "
        f"for records beside it), not {MARINA_SPOOL_MAX_BYTES}"
    )
MARINA_TRACE_BODIES = env_bool("MARINA_TRACE_BODIES", False)
# Days of traces (and their spans) to keep; `keep` (the default) keeps them all.
# Older ones are deleted by `manage.py prune_traces` and, once an hour, by each
# server's ledger writer in small batches. spend_daily and benchmark runs are never pruned.
_retention = env_str("MARINA_TRACE_RETENTION_DAYS", "keep").lower()
MARINA_TRACE_RETENTION_DAYS = (
    None if _retention in ("", "keep", "off") else env_int("MARINA_TRACE_RETENTION_DAYS", 0, minimum=1)
)
# PostgreSQL only: traces and spans in one partition per UTC day (ledger/spend/partitions.py),
# so retention drops whole days and a report over a date range reads only those days.
# Read by migration 0015 (which converts existing tables) and by the writer, which keeps
# MARINA_TRACE_PARTITION_DAYS_AHEAD days of partitions ready. SQLite has no partitions.
MARINA_TRACE_PARTITIONS = env_bool("MARINA_TRACE_PARTITIONS", True)
MARINA_TRACE_PARTITION_DAYS_AHEAD = env_int("MARINA_TRACE_PARTITION_DAYS_AHEAD", 7, minimum=1)
# Friendly names for upstream ids, listed by /v1/models: `fast=openrouter/openai/gpt-5.2`.
MARINA_MODEL_ALIASES = env_pairs("MARINA_MODEL_ALIASES")

# Built-in providers: prefix -> default base URL of an OpenAI-compatible API.
# Each base URL can be overridden by MARINA_<PROVIDER>_BASE_URL and each key
# comes from <PROVIDER>_API_KEY (or <PROVIDER>_API_KEY_FILE).
BUILTIN_PROVIDERS = {
    "openrouter": "https://openrouter.ai/api/v1",
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com/v1",
    "google": "https://generativelanguage.googleapis.com/v1beta/openai",
    "groq": "https://api.groq.com/openai/v1",
    "deepseek": "https://api.deepseek.com/v1",
    "mistral": "https://api.mistral.ai/v1",
    "xai": "https://api.x.ai/v1",
    "together": "https://api.together.xyz/v1",
    "cerebras": "https://api.cerebras.ai/v1",
}
# Extra OpenAI-compatible providers (a local vLLM or llama.cpp server):
# MARINA_EXTRA_PROVIDERS=local=http://127.0.0.1:8000/v1 ; key (optional) LOCAL_API_KEY.
MARINA_EXTRA_PROVIDERS = env_pairs("MARINA_EXTRA_PROVIDERS")


def _on_this_machine(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ip_address(host).is_loopback
    except ValueError:
        return False


def _provider(name: str, default_url: str) -> dict[str, str]:
    key_env = f"{name.upper().replace('-', '_')}_API_KEY"
    base_url = env_str(f"MARINA_{name.upper().replace('-', '_')}_BASE_URL", default_url).rstrip("/")
    provider = {"base_url": base_url, "api_key": env_secret(key_env), "key_env": key_env}
    # A built-in provider pointed at a server on this machine (a local stand-in, a
    # test double) needs no key, as an extra provider does not: the base URL alone
    # configures it. A remote one still needs its key.
    if base_url != default_url.rstrip("/") and _on_this_machine(base_url):
        provider["keyless_ok"] = "yes"
    return provider


MARINA_PROVIDERS = {name: _provider(name, url) for name, url in BUILTIN_PROVIDERS.items()}
if not MARINA_PROVIDERS["google"]["api_key"]:
    MARINA_PROVIDERS["google"]["api_key"] = env_secret("GEMINI_API_KEY")
for _name, _url in MARINA_EXTRA_PROVIDERS.items():
    MARINA_PROVIDERS[_name] = _provider(_name, _url) | {"keyless_ok": "yes"}

# Providers that serve other vendors' models under `<vendor>/<model>` ids. An id
# whose vendor prefix has no key (`openai/gpt-4.1` without OPENAI_API_KEY) is
# tried on these, with the full id.
MARINA_AGGREGATORS = ("together", "openrouter")
# The fallback loop for ids without a provider prefix (`gpt-4.1-mini`,
# `meta-llama/llama-3.1-8b`): configured providers in this order, local
# servers (MARINA_EXTRA_PROVIDERS) first and aggregators last, as in the reference.
_DEFAULT_ORDER = [*MARINA_EXTRA_PROVIDERS, "anthropic", "openai", "google", "groq", "cerebras", "deepseek",
                  "mistral", "xai", "together", "openrouter"]
MARINA_PROVIDER_ORDER = [p.strip() for p in env_str("MARINA_PROVIDER_ORDER").split(",") if p.strip()] or _DEFAULT_ORDER
for _name in MARINA_PROVIDER_ORDER:
    if _name not in MARINA_PROVIDERS:
        raise ConfigError(f"MARINA_PROVIDER_ORDER names '{_name}', which is not a provider ({', '.join(MARINA_PROVIDERS)})")
# What `default` and `marina/default` mean: an explicit `<provider>/<model>` id.
MARINA_DEFAULT_MODEL = env_str("MARINA_DEFAULT_MODEL")
# A passthru pin: every plain request goes to this `<provider>/<model>` whatever
# it asked for, and formations may use no other model (403 model_not_allowed).
MARINA_PASSTHRU_MODEL = env_str("MARINA_PASSTHRU_MODEL")

# Rate limit on POST /v1/... per client (key name, else IP), a token bucket
# shared by every worker and host through the database: RPS tokens a second,
# up to BURST at once. 0 (the default) is off.
MARINA_RATE_LIMIT_RPS = env_float("MARINA_RATE_LIMIT_RPS", 0.0, minimum=0.0)
MARINA_RATE_LIMIT_BURST = env_int("MARINA_RATE_LIMIT_BURST", 0, minimum=0) or max(1, round(MARINA_RATE_LIMIT_RPS * 5))
# The proxies in front of Marina whose X-Forwarded-For hops are believed
# (kernel/proxies.py): a count, or addresses/CIDRs; empty: the socket peer.
# The client is the right-most hop that is not a trusted proxy. The older
# MARINA_TRUST_PROXY=true means one proxy in front (MARINA_TRUSTED_PROXIES=1).
MARINA_TRUSTED_PROXIES = env_str("MARINA_TRUSTED_PROXIES") or ("1" if env_bool("MARINA_TRUST_PROXY", False) else "")
try:
    _proxies.parse(MARINA_TRUSTED_PROXIES)
except ValueError as _exc:
    raise ConfigError(f"MARINA_TRUSTED_PROXIES: {_exc}") from None
# Origins allowed to call /v1 from a browser (comma list, or *); empty sends no CORS headers.
MARINA_CORS_ORIGINS = [o.strip() for o in env_str("MARINA_CORS_ORIGINS").split(",") if o.strip()]

# --- The verification formation (marina/verify:<proposer>[+<checker>]) ---------
# Checker when the id names none (an explicit upstream id); empty = the proposer.
MARINA_VERIFY_CHECKER_MODEL = env_str("MARINA_VERIFY_CHECKER_MODEL")
# Review-and-revise rounds, 0..3; 0 = review only (a revise verdict is reported as `flagged`).
MARINA_VERIFY_ROUNDS = env_int("MARINA_VERIFY_ROUNDS", 1, minimum=0)
if MARINA_VERIFY_ROUNDS > 3:
    raise ConfigError(f"MARINA_VERIFY_ROUNDS must be at most 3, not {MARINA_VERIFY_ROUNDS}")
# The checker's reasoning_effort (low, medium, high, ...), `off` to send none;
# empty = the caller's reasoning fields carry over.
MARINA_VERIFY_CHECKER_EFFORT = env_str("MARINA_VERIFY_CHECKER_EFFORT").lower()
if MARINA_VERIFY_CHECKER_EFFORT and not MARINA_VERIFY_CHECKER_EFFORT.isalpha():
    raise ConfigError(
        f"MARINA_VERIFY_CHECKER_EFFORT must be a word such as low or high, or off, not {MARINA_VERIFY_CHECKER_EFFORT!r}"
    )

# --- Observability (docs/observability.md) -------------------------------------
# GET /metrics: loopback clients only, unless this token is set (then any
# client sending `Authorization: Bearer <token>`).
MARINA_METRICS_TOKEN = env_secret("MARINA_METRICS_TOKEN")
# OpenTelemetry export of every trace (observability/otel.py) is configured by
# the SDK's own variables: it is on when OTEL_EXPORTER_OTLP_ENDPOINT or
# OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (and neither OTEL_SDK_DISABLED=true
# nor OTEL_TRACES_EXPORTER=none); otherwise nothing of OpenTelemetry is loaded.
# The SDK reads the rest (headers, timeout, OTEL_BSP_*) itself.
_otel_endpoints = {name: env_str(name) for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")}
for _name, _url in _otel_endpoints.items():
    if _url and not _url.startswith(("http://", "https://")):
        raise ConfigError(f"{_name} must be an http:// or https:// URL, not {_url!r}")
for _name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
    if env_str(_name) not in ("", "http/protobuf"):
        raise ConfigError(f"{_name}: Marina exports OTLP over HTTP (http/protobuf) only, not {env_str(_name)!r}")
MARINA_OTEL_EXPORT = (
    any(_otel_endpoints.values())
    and not env_bool("OTEL_SDK_DISABLED", False)
    and env_str("OTEL_TRACES_EXPORTER", "otlp").lower() != "none"
)
# Where the spans go (docs/observability.md, "Spans off the database"): `db` (the
# default) writes them to the ledger, and exports them too if an endpoint is set
# above; `both` is the same but refuses to start without the export; `otel` sends
# them only to the collector: the ledger then keeps spend_daily, each call's trace
# row (request ids, conversation identity, status, tokens, cost; no body) and the
# few formation-decision spans the benchmark links read (ledger/spend/trace_writer.py).
MARINA_TRACE_STORE = env_choice("MARINA_TRACE_STORE", ("db", "otel", "both"), "db")
if MARINA_TRACE_STORE != "db" and not MARINA_OTEL_EXPORT:
    raise ConfigError(
        f"MARINA_TRACE_STORE={MARINA_TRACE_STORE} needs the OTLP export: set OTEL_EXPORTER_OTLP_ENDPOINT "
        "(or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) to the collector's http(s) URL, with neither OTEL_SDK_DISABLED=true "
        "nor OTEL_TRACES_EXPORTER=none, or set MARINA_TRACE_STORE=db"
    )

# --- The obligations ledger and the argument check (marina/obligations:, marina/argcheck:) ---
# Model for the ledger's own calls (extraction, judgement); empty = the agent model.
MARINA_OBLIGATIONS_MODEL = env_str("MARINA_OBLIGATIONS_MODEL")
# The argument check's judge; empty = MARINA_OBLIGATIONS_MODEL, then the agent model.
MARINA_ARGCHECK_MODEL = env_str("MARINA_ARGCHECK_MODEL")
# flagged: judge only calls with a value nobody stated; all-writes: judge every write call.
MARINA_ARGCHECK_TRIGGER = env_str("MARINA_ARGCHECK_TRIGGER", "flagged").lower()
if MARINA_ARGCHECK_TRIGGER == "all":
    MARINA_ARGCHECK_TRIGGER = "all-writes"
if MARINA_ARGCHECK_TRIGGER not in ("flagged", "all-writes"):
    raise ConfigError(f"MARINA_ARGCHECK_TRIGGER must be flagged or all-writes, not {MARINA_ARGCHECK_TRIGGER!r}")
# Seconds a conversation's formation state lives after its last turn (default 6 h).
MARINA_STATE_TTL = env_int("MARINA_STATE_TTL", 6 * 3600, minimum=1)

# --- The τ² reproduction kit (manage.py repro_tau2, docs/repro.md) --------------------------
# The tau2 console script to run; empty = `tau2` on PATH, else the one .ci/install-tau2 (and
# scripts/test) installed in MARINA_TAU2_VENV (default ~/.cache/marina/tau2-venv).
TAU2_BIN = env_str("TAU2_BIN")
TAU2_VENV = env_str("MARINA_TAU2_VENV") or str(Path.home() / ".cache" / "marina" / "tau2-venv")

# --- Lessons (docs/lessons.md) -------------------------------------------------
# on: recall and inject; observe: recall and report (x-marina-lessons: observe:<ids>), inject
# nothing; off: neither (the lessons-free ablation arm).
MARINA_LESSONS = env_str("MARINA_LESSONS", "on").lower()
if MARINA_LESSONS not in ("on", "observe", "off"):
    raise ConfigError(f"MARINA_LESSONS must be on, observe or off, not {MARINA_LESSONS!r}")
