"""The doors' tests: the real clients against Marina in-process and the scripted upstream."""
from __future__ import annotations

import pytest

from tests.upstream import ScriptedUpstream


@pytest.fixture
def speakers(marina_config, upstream: ScriptedUpstream):
    """openai, anthropic and groq (a provider without /responses) keyed and pointed at the scripted upstream."""
    providers = {name: dict(conf) for name, conf in marina_config.MARINA_PROVIDERS.items()}
    for name in ("openai", "anthropic", "groq"):
        providers[name] = {"base_url": upstream.base_url, "api_key": f"sk-{name}-provider-key-55555", "key_env": f"{name.upper()}_API_KEY"}
    marina_config.MARINA_PROVIDERS = providers
    return marina_config
