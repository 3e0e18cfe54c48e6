"""The opt-in headers of the stackable checks (`x-marina-obligations`,
`x-marina-argcheck`, `x-marina-lessons`): on, observe or off."""
from __future__ import annotations

from collections.abc import Mapping

from passthru.errors import ApiError

VALUES = {"on": "on", "true": "on", "1": "on", "observe": "observe", "off": "off", "false": "off", "0": "off"}


def header_mode(headers: Mapping[str, str], name: str) -> str | None:
    """The header's mode (on, observe, off), None when absent; a 400 for anything else."""
    raw = headers.get(name)
    if raw is None:
        return None
    mode = VALUES.get(raw.strip().lower())
    if mode is None:
        raise ApiError(400, f"The header {name} must be on, observe or off, not {raw[:40]!r}.", code="invalid_header")
    return mode
