"""The board's other two domains, as τ² declares them: banking_knowledge's agent tools classified as
τ² types them (KB_search*, grep: lookups), its policy recognised by the lessons; and the user
simulator's own tools (telecom's device, banking's applications) left to the user: sent through a
formation id, τ²'s user simulator is answered by the model the id wraps, untouched."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ledger.models import Trace
from passthru.formations import answer_model
from passthru.formations.lessons import recognised_benchmark
from passthru.formations.tooleffect import READ_ONLY, classify
from passthru.formations.usersim import is_tau2_user_simulator
from tests.conftest import MARINA_KEY
from tests.passthru.formations.play import calls

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "tau2"
BANKING = json.loads((FIXTURES / "tools-banking_knowledge.json").read_text())
TELECOM_USER_TOOLS = json.loads((FIXTURES / "tools.json").read_text())["telecom"]["user_tools"]
AGENT_TOOLS = [(t["name"], t["openai_schema"], t["expected"]) for t in BANKING["agent_tools"]]
# τ²'s user simulator's system prompt as it opens (tau2/data/tau2/user_simulator/simulation_guidelines_tools.md).
USER_SIM = {
    "role": "system",
    "content": "# User Simulation Guidelines\n\nYou are playing the role of a customer contacting a customer service "
    "representative agent. \nYour goal is to simulate realistic customer interactions while following specific "
    "scenario instructions.\nYou have some tools to perform the actions on your end that might be requested by the "
    "agent to diagnose and resolve your issue.\n\n<scenario>\nYou are John Smith...\n</scenario>",
}


def test_the_fixture_is_taus_own_banking_tools_with_every_search_tool():
    names = {name for name, _, _ in AGENT_TOOLS}
    assert {"KB_search", "KB_search_bm25", "KB_search_dense", "grep", "shell", "log_verification"} <= names
    assert len(AGENT_TOOLS) >= 60 and {t["name"] for t in BANKING["user_tools"]} >= {"apply_for_credit_card", "submit_referral"}


@pytest.mark.parametrize(("schema", "expected"), [(s, e) for _, s, e in AGENT_TOOLS], ids=[n for n, _, _ in AGENT_TOOLS])
def test_banking_agent_tools_are_classified_as_tau2_types_them(schema, expected):
    assert classify(schema) == expected


@pytest.mark.parametrize("name", ["KB_search", "KB_search_bm25", "KB_search_dense", "grep"])
def test_knowledge_base_searches_are_lookups(name):
    (schema,) = [s for n, s, _ in AGENT_TOOLS if n == name]
    assert classify(schema) == READ_ONLY


def test_the_banking_policy_is_recognised_whatever_the_retrieval_config():
    # τ²'s LLM agent: its instructions, then the retrieval config's prompt, headed by policy_header.md.
    system = {"role": "system", "content": "<instructions>\nYou are a customer service agent that helps the user "
              "according to the <policy> provided below.\n</instructions>\n<policy>\n# Rho-Bank Customer Service "
              "Policy\n\nYou are a helpful customer service agent for Rho-Bank.\n</policy>"}  # fmt: skip
    assert recognised_benchmark([system, {"role": "user", "content": "hi"}]) == "tau2-banking_knowledge"
    assert recognised_benchmark([USER_SIM]) == ""  # the user simulator's prompt names no agent policy
    assert is_tau2_user_simulator([USER_SIM]) and not is_tau2_user_simulator([system])


@pytest.mark.parametrize(
    ("model_id", "answer"),
    [
        ("marina/verify:openrouter/m+openrouter/checker", "openrouter/m"),
        ("marina/obligations:marina/argcheck:openrouter/m", "openrouter/m"),
        ("marina/obligations:marina/verify:openrouter/m", "openrouter/m"),
        ("marina/lessons:marina/verify:openrouter/m", "openrouter/m"),
    ],
)
def test_answer_model_takes_every_formation_prefix_off(model_id, answer):
    assert answer_model(model_id) == answer


def _tools() -> list[dict[str, Any]]:
    return [t["openai_schema"] for t in TELECOM_USER_TOOLS] + [t["openai_schema"] for t in BANKING["user_tools"]]


@pytest.mark.parametrize(
    "model_id",
    ["marina/verify:openrouter/openai/gpt-5.2", "marina/obligations:marina/argcheck:openrouter/openai/gpt-5.2",
     "marina/lessons:marina/verify:openrouter/openai/gpt-5.2"],
)  # fmt: skip
def test_no_formation_wraps_the_user_simulators_own_tool_calls(marina, upstream, model_id):
    client = marina.openai(MARINA_KEY)
    upstream.script(calls(("toggle_airplane_mode", {}), ("apply_for_credit_card", {"card_type": "Gold Rewards Card"})))
    messages = [USER_SIM, {"role": "user", "content": "Hi! How can I help you today?"},
                {"role": "assistant", "content": "My phone has no signal."},
                {"role": "user", "content": "Please turn airplane mode off, then apply for the card."}]  # fmt: skip
    raw = client.chat.completions.with_raw_response.create(model=model_id, messages=messages, tools=_tools())
    reply = raw.parse()
    assert [c.function.name for c in reply.choices[0].message.tool_calls] == ["toggle_airplane_mode", "apply_for_credit_card"]
    (sent,) = upstream.requests  # one call: no extraction, review, judgement or revision
    assert sent.body["model"] == "openai/gpt-5.2" and sent.body["messages"] == messages
    trace = Trace.objects.get(request_id=raw.headers["x-request-id"])
    assert trace.route == "passthru" and [s.name for s in trace.spans.all()] == ["upstream"]
    assert "x-marina-lessons" not in raw.headers
