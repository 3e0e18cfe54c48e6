"""Typed readers for environment variables.

Every deploy-time value of Marina comes from the environment through these
helpers, so a malformed value fails loudly at start-up instead of quietly
becoming a default.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TypeVar

from dotenv import load_dotenv

_N = TypeVar("_N", int, float)


class ConfigError(ValueError):
    """A malformed environment variable; the message names it."""


def load_env_file(default: Path) -> None:
    """Read `.env` (KEY=value lines, python-dotenv's syntax) into the environment
    before any setting is read. A variable already set in the environment wins
    over the file. MARINA_ENV_FILE names another file; the default one may be
    absent, a named one must exist."""
    named = os.environ.get("MARINA_ENV_FILE", "").strip()
    path = Path(named) if named else default
    if named and not path.exists():
        raise ConfigError(f"MARINA_ENV_FILE: no such file {named}")
    if path.is_file():
        load_dotenv(path, override=False)
    # Blank means the default (.env.example lists it blank), but prometheus-client goes
    # multiprocess on the variable merely being set, and then writes its sample files
    # into the current directory: so a blank one is unset.
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR", "unset").strip():
        del os.environ["PROMETHEUS_MULTIPROC_DIR"]


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default).strip()


def env_secret(name: str) -> str:
    """A secret from NAME, or from the file named by NAME_FILE (Docker/K8s style)."""
    value = os.environ.get(name, "").strip()
    path = os.environ.get(f"{name}_FILE", "").strip()
    if not value and path:
        try:
            value = Path(path).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"{name}_FILE: cannot read {path}: {exc.strerror}") from None
    return value


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name} must be true or false, not {raw!r}")


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    return _env_number(name, default, minimum, int, "a whole number")


def env_float(name: str, default: float, *, minimum: float = 0.0) -> float:
    return _env_number(name, default, minimum, float, "a number")


def _env_number(name: str, default: _N, minimum: _N, parse: Callable[[str], _N], kind: str) -> _N:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = parse(raw)
    except ValueError:
        raise ConfigError(f"{name} must be {kind}, not {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, not {value}")
    return value


def env_choice(name: str, choices: tuple[str, ...], default: str) -> str:
    """One of `choices` (case-insensitive); unset or blank is the default.
    Anything else stops start-up, naming the variable and the choices."""
    raw = os.environ.get(name, "").strip()
    value = raw.lower() or default
    if value not in choices:
        raise ConfigError(f"{name} must be {', '.join(choices[:-1])} or {choices[-1]}, not {raw!r}")
    return value


def env_log_level(name: str = "MARINA_LOG_LEVEL") -> str:
    """A log level in any case (`info`, `INFO`), as gunicorn takes it (lower
    case; logging wants it upper); unset or blank is info."""
    return env_choice(name, ("debug", "info", "warning", "error", "critical"), "info")


NO_CAP = {"0", "off", "none", "unlimited", "disabled"}


def env_money_or_off(name: str, default: str) -> Decimal | None:
    """A positive dollar amount, or None (no cap) for 0, off, none or unlimited;
    unset or blank is the default. Anything else stops start-up, naming the variable."""
    raw = os.environ.get(name, "").strip() or default
    if raw.lower() in NO_CAP:
        return None
    try:
        value = Decimal(raw)
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite() or value < 0:
        raise ConfigError(f"{name} must be a dollar amount such as 50, or 0 / unlimited / off for no cap, not {raw!r}")
    return None if value == 0 else value


def env_pairs(name: str) -> dict[str, str]:
    """`a=x,b=y` into a dict; for provider lists and model aliases."""
    raw = os.environ.get(name, "").strip()
    pairs: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in raw.split(","))):
        key, sep, value = entry.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ConfigError(f"{name}: expected name=value, got {entry!r}")
        pairs[key.strip()] = value.strip()
    return pairs
