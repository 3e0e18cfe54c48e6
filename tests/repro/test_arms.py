"""The kit's arms: agent ids, groups, refusals."""
from __future__ import annotations

import pytest

from repro.arms import ArmError, parse_arms

MODEL = "openrouter/openai/gpt-5.2"


def test_default_arms_are_single_then_verify() -> None:
    arms = parse_arms(None, model=MODEL, checker=None)
    assert [(a.name, a.agent_model, a.group("airline"), a.submission) for a in arms] == [
        ("single", MODEL, "tau2-airline-single", "standard"),
        ("verify", f"marina/verify:{MODEL}", "tau2-airline-verify", "custom"),
    ]


def test_verify_names_its_checker_only_when_it_differs() -> None:
    assert parse_arms("verify", model=MODEL, checker=MODEL)[0].agent_model == f"marina/verify:{MODEL}"
    other = "openrouter/anthropic/claude-sonnet-4.5"
    assert parse_arms("verify", model=MODEL, checker=other)[0].agent_model == f"marina/verify:{MODEL}+{other}"


def test_opt_in_arms_and_crews() -> None:
    arms = parse_arms("obligations, argcheck,obligations+argcheck,lessons,marina:support", model=MODEL, checker=None)
    assert [(a.agent_model, a.group("retail"), a.target_kind) for a in arms] == [
        (f"marina/obligations:{MODEL}", "tau2-retail-obligations", "model"),
        (f"marina/argcheck:{MODEL}", "tau2-retail-argcheck", "model"),
        (f"marina/obligations:marina/argcheck:{MODEL}", "tau2-retail-obligations_argcheck", "model"),
        (f"marina/lessons:{MODEL}", "tau2-retail-lessons", "model"),
        ("marina:support", "tau2-retail-marina:support", "crew"),
    ]
    assert arms[2].slug == "obligations_argcheck" and arms[4].slug == "marina_support"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("single,bogus", "unknown arm 'bogus': choose from single, verify, obligations, argcheck, "
                         "obligations+argcheck, lessons or marina:<crew>"),
        ("single,single", "arm 'single' is given twice"),
        ("marina:Bad Crew", "unknown arm 'marina:Bad Crew'"),
        (" , ", "--arm names no arm"),
    ],
)  # fmt: skip
def test_bad_arms_are_refused(text: str, message: str) -> None:
    with pytest.raises(ArmError) as refused:
        parse_arms(text, model=MODEL, checker=None)
    assert str(refused.value).startswith(message)
