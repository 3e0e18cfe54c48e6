"""/v1/models before first use: aliases, formation templates and other parts'
ids (crews) are listed; ids whose provider is gone are not."""
from __future__ import annotations

from datetime import timedelta

from ledger.models import SpendDaily
from ledger.spend.selectors import utc_today
from passthru import models_list
from tests.conftest import MARINA_KEY


def _served(model: str, provider: str, days_ago: int = 0, errors: int = 0, key: str = "tester") -> None:
    SpendDaily.objects.create(
        day=utc_today() - timedelta(days=days_ago), key_name=key, requested_model=model, provider=provider,
        upstream_model=model.partition("/")[2], calls=3, errors=errors,
    )  # fmt: skip


def _gone_provider(marina_config) -> None:
    providers = dict(marina_config.MARINA_PROVIDERS)
    providers["gone"] = {"base_url": "http://127.0.0.1:9/v1", "api_key": "", "key_env": "GONE_API_KEY"}
    marina_config.MARINA_PROVIDERS = providers


def test_aliases_and_formation_templates_are_listed_before_first_use(openai_client, marina_config) -> None:
    _gone_provider(marina_config)
    marina_config.MARINA_MODEL_ALIASES = {"fast": "openrouter/openai/gpt-5.2", "old": "gone/some-model"}
    ids = [m.id for m in openai_client.models.list()]
    assert "fast" in ids and "marina/verify:fast" in ids
    assert "old" not in ids and "marina/verify:old" not in ids  # its provider has no key any more


def test_default_gets_a_template_when_the_operator_set_one(openai_client, marina_config) -> None:
    assert "marina/verify:default" not in [m.id for m in openai_client.models.list()]
    marina_config.MARINA_DEFAULT_MODEL = "openrouter/openai/gpt-5.2"
    assert "marina/verify:default" in [m.id for m in openai_client.models.list()]


def test_recent_ids_are_dropped_once_their_provider_is_gone(openai_client, marina_config) -> None:
    _gone_provider(marina_config)
    _served("openrouter/qwen/qwen3", "openrouter", days_ago=2)
    _served("gone/llama-3", "gone")
    _served("demo/alpha-large", "demo")  # `manage.py demo`'s scripted provider: never configured
    _served("marina/verify:openrouter/openai/gpt-5.2", "openrouter")
    _served("openrouter/old-model", "openrouter", days_ago=20)  # not served in the last week
    listed = {m.id: m.owned_by for m in openai_client.models.list()}
    assert listed["openrouter/qwen/qwen3"] == "openrouter"
    assert listed["marina/verify:openrouter/openai/gpt-5.2"] == "marina"
    assert not {"gone/llama-3", "demo/alpha-large", "openrouter/old-model"} & set(listed)


def test_ids_whose_every_call_failed_are_not_listed(openai_client) -> None:
    """A mistyped id the provider answered 404 is in spend_daily (as errors), not a model to offer."""
    _served("openrouter/openai/gpt-5.2-typo", "openrouter", errors=3)
    _served("openrouter/qwen/qwen3", "openrouter", errors=2)  # answered once: served
    listed = {m.id for m in openai_client.models.list()}
    assert "openrouter/qwen/qwen3" in listed
    assert "openrouter/openai/gpt-5.2-typo" not in listed


def test_other_parts_add_their_ids_through_the_hook(openai_client, monkeypatch) -> None:
    async def crews() -> list[str]:
        return ["crew/support-desk"]

    monkeypatch.setattr(models_list, "EXTRA_SOURCES", [crews])
    listed = {m.id: m.owned_by for m in openai_client.models.list()}
    assert listed["crew/support-desk"] == "marina"


def test_a_key_is_listed_the_ids_it_called_not_anothers(marina, openai_client, marina_config, transactional_db) -> None:
    """Issue 42 C5: Bob was listed the ids only Alice had called. A key sees
    the recent ids of its own calls (an operator key: its callers'); a
    read-all key sees every key's, as it reads every key's spend."""
    from passthru import auth

    bob_key, ops_key = "sk-marina-bob-key-3333333333333333", "sk-marina-ops-key-4444444444444444"
    marina_config.MODEL_API_KEYS = f"{MARINA_KEY}:tester,{bob_key}:bob,{ops_key}:ops/*"
    auth.forget()
    _served("openrouter/alice/secret-finetune", "openrouter")  # the `tester` key's
    _served("openrouter/bob/own-model", "openrouter", key="bob")
    _served("openrouter/carol/agent-model", "openrouter", key="ops/carol")

    def listed(key: str) -> set[str]:
        ids = {m.id for m in marina.openai(key).models.list()}
        return ids & {"openrouter/alice/secret-finetune", "openrouter/bob/own-model", "openrouter/carol/agent-model"}

    assert listed(MARINA_KEY) == {"openrouter/alice/secret-finetune"}
    assert listed(bob_key) == {"openrouter/bob/own-model"}
    assert listed(ops_key) == {"openrouter/carol/agent-model"}
    auditor = auth.create_key("auditor", reads_all=True)
    assert len(listed(auditor)) == 3
