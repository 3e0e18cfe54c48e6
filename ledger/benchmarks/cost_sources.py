"""Where a cost came from, in the words every page, the admin and `import_tau2` use: one
wording per source (an unpriced run reads "unpriced" everywhere, never "unknown" here and
"none" there)."""
from __future__ import annotations

COST_SOURCES = {
    "cli": "given at import (--cost-usd)",
    "spend": "Marina's spend ledger",
    "tau2": "τ²'s own LiteLLM estimate",
    "none": "unpriced",
    "provider": "reported by the provider",
    "price_table": "genai-prices price table",
}


def cost_source_label(source: str) -> str:
    return COST_SOURCES.get(source, source or "unknown")
