"""The read-only/write classifier against τ²'s own labels and the declared hints."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from passthru.formations.tooleffect import (
    READ_ONLY,
    WRITE,
    call_effect,
    classify,
    description_reads,
    effects,
    name_words,
)

# In the repository (tests/fixtures/tau2, see its README), so a clone needs nothing beside it.
TOOLS_JSON = Path(__file__).resolve().parents[2] / "fixtures" / "tau2" / "tools.json"


def _tau2_tools() -> list[tuple[str, dict[str, Any], str]]:
    data = json.loads(TOOLS_JSON.read_text())
    return [
        (f"{domain}/{side}/{tool['name']}", tool["openai_schema"], tool["expected"])
        for domain in ("airline", "retail", "telecom")
        for side, tools in data[domain].items()
        for tool in tools
    ]


TAU2_TOOLS = _tau2_tools()


def test_fixture_covers_every_domain_and_both_classes():
    domains = {case_id.split("/")[0] for case_id, _, _ in TAU2_TOOLS}
    assert domains == {"airline", "retail", "telecom"}
    assert len(TAU2_TOOLS) >= 60
    assert {expected for _, _, expected in TAU2_TOOLS} == {READ_ONLY, WRITE}


@pytest.mark.parametrize(("schema", "expected"), [(s, e) for _, s, e in TAU2_TOOLS], ids=[i for i, _, _ in TAU2_TOOLS])
def test_agrees_with_tau2_for_every_tool(schema, expected):
    assert classify(schema) == expected


def _tool(name: str, description: str = "", **extra: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, **extra}}


@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        # Declared hints win over the name, wherever they sit.
        ({**_tool("update_profile"), "annotations": {"readOnlyHint": True}}, READ_ONLY),
        (_tool("get_and_reset_counter", annotations={"readOnlyHint": False}), WRITE),
        ({**_tool("list_things"), "annotations": {"destructiveHint": True}}, WRITE),
        # Lookup-style names, snake or camel case.
        (_tool("getUserDetails"), READ_ONLY),
        (_tool("think"), READ_ONLY),
        (_tool("is_eligible_for_refund"), READ_ONLY),
        (_tool("lookup-order"), READ_ONLY),
        # Descriptions: a lookup verb first (after filler) and no change named.
        (_tool("weather", "This tool returns the forecast for a city."), READ_ONLY),
        (_tool("speedtest", "Use this to measure the connection speed."), READ_ONLY),
        (_tool("balance", "Returns the balance and then resets the counter."), WRITE),
        (_tool("sync_account", "Checks the account and updates it when stale."), WRITE),
        # Everything else writes.
        (_tool("refund_order", "Refund an order."), WRITE),
        (_tool("do_it"), WRITE),
        ({"type": "function", "function": {}}, WRITE),
    ],
)
def test_hints_names_and_descriptions(tool, expected):
    assert classify(tool) == expected


def test_name_words_split_camel_case_and_separators():
    assert name_words("getUserDetails") == ["get", "user", "details"]
    assert name_words("crm.search:contacts") == ["crm", "search", "contacts"]


def test_description_needs_a_leading_lookup_verb():
    assert description_reads("Shows the status bar icons.")
    assert not description_reads("The status bar icons are shown.")
    assert not description_reads("")


def test_undeclared_calls_are_classified_by_name_and_default_to_write():
    declared = effects([_tool("weather", "Returns the forecast."), "not a tool", {"function": {"name": 3}}])
    assert declared == {"weather": READ_ONLY}
    assert call_effect("weather", declared) == READ_ONLY
    assert call_effect("get_order", declared) == READ_ONLY
    assert call_effect("cancel_order", declared) == WRITE
