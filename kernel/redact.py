"""Credential scrubbing shared by traces (MARINA_TRACE_BODIES=on) and the τ²
adapter (results files carry llm_args.api_key verbatim)."""
from __future__ import annotations

import re
from typing import Any

# Keys whose values are credentials wherever they appear. Anchored, so
# `max_tokens` or `prompt_tokens` are not mistaken for a token.
SECRET_KEY_NAMES = re.compile(
    r"^(.*[_-])?(api[_-]?key|apikey|authorization|(access|auth|bearer|refresh|id)?[_-]?token"
    r"|secret|client[_-]?secret|password|passwd|credentials?)$",
    re.I,
)
# Strings shaped like bearer tokens (any case: the scheme is case-insensitive)
# or provider keys inside free text.
SECRET_VALUES = re.compile(r"((?i:bearer)\s+[A-Za-z0-9._\-]{8,}|\b(sk|pk|rk)-[A-Za-z0-9_\-]{8,})")
REDACTED = "[redacted]"


def is_secret_key(name: str) -> bool:
    return bool(SECRET_KEY_NAMES.match(name))


def redact(value: Any) -> Any:
    """A copy of value with credential-named keys and key-shaped strings replaced."""
    if isinstance(value, dict):
        return {k: REDACTED if is_secret_key(str(k)) else redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return SECRET_VALUES.sub(REDACTED, value)
    return value
