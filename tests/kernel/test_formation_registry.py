"""kernel/formations.py is the one list of formations: everything that names
one reads it, and every entry is served. These tests hold the readers to it
(a formation added to the registry alone is answered, described and filed)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from kernel import formations as registry
from ledger.benchmarks import submission
from passthru import formations
from passthru.errors import ApiError
from passthru.formations import lessons as recall
from repro.arms import NAMED_ARMS, agent_model


def test_names_and_prefixes_are_unique_and_prefixes_read_as_marina_ids() -> None:
    assert len({entry.name for entry in registry.ALL}) == len(registry.ALL)
    assert len(set(registry.PREFIXES)) == len(registry.ALL)
    for entry in registry.ALL:
        assert entry.prefix.startswith("marina/") and entry.prefix.endswith(":"), entry
        assert entry.template == entry.prefix + "<model>"
        assert entry.description and entry.model
    assert registry.stacked("m", "obligations", "argcheck") == "marina/obligations:marina/argcheck:m"


@pytest.mark.parametrize("entry", registry.ALL, ids=lambda e: e.name)
def test_every_registered_prefix_is_answered_by_the_dispatch(entry: registry.Entry) -> None:
    """No prefix of the registry is refused as an unknown formation; each is
    run alone (a formation of BY_PREFIX), by the stack, or recalled (lessons)."""
    model_id = entry.wrap("openrouter/openai/gpt-5.2")
    formation, inner, lessons = formations.choose(model_id, {})
    if entry.stacks:
        assert formation is not None or lessons, entry
        assert entry.template in formations.StackFormation.listed_ids
    else:
        assert formation is not None and formation.name == entry.name and formation in formations.BY_PREFIX
        assert entry.template in formation.listed_ids


def test_an_unregistered_marina_prefix_is_a_404_naming_the_registered_ones() -> None:
    with pytest.raises(ApiError) as refused:
        formations.choose("marina/nope:openrouter/openai/gpt-5.2", {})
    assert refused.value.status == 404
    for prefix in registry.PREFIXES:
        assert prefix in refused.value.message


@pytest.mark.parametrize("entry", [e for e in registry.ALL if e.header], ids=lambda e: e.name)
def test_every_opt_in_header_turns_its_formation_on(entry: registry.Entry) -> None:
    """The stacked checks' headers make a stack; lessons' is read by the passthru (recall.requested)."""
    headers = {entry.header: "on"}
    formation, inner, _ = formations.choose("openrouter/openai/gpt-5.2", headers)
    assert inner == "openrouter/openai/gpt-5.2"
    assert formation is not None or recall.requested(headers) == "on"
    assert (formation is None) == (entry is registry.LESSONS)


@pytest.mark.parametrize("entry", registry.ALL, ids=lambda e: e.name)
def test_a_submission_reads_each_formation_from_the_registry(entry: registry.Entry) -> None:
    run = SimpleNamespace(agent_model=entry.wrap("openai/gpt-5.2"), target="", target_kind="model", agent_args={})
    arm = submission.arm_of(run)
    assert arm.layers == (entry.name,) and arm.base_model == "openai/gpt-5.2"
    assert arm.custom is entry.custom
    assert arm.steps == (f"{entry.prefix} {entry.description}",)


def test_the_kits_arms_are_the_registrys_prefixes() -> None:
    assert agent_model("obligations+argcheck", "m", None) == registry.stacked("m", "obligations", "argcheck")
    for name in NAMED_ARMS:
        if name in registry.BY_NAME:
            assert agent_model(name, "m", None) == registry.BY_NAME[name].wrap("m")
    assert agent_model("verify", "a", "b") == registry.VERIFY.wrap("a+b")
