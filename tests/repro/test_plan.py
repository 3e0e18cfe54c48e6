"""Plans: the leaderboard's settings in τ²'s llm args, both τ² command lines, the estimate."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from repro import tau2cli
from repro.plan import Options, build, llm_args, render
from tests.ledger.builders import make_run

NVIDIA = tau2cli.Tau2Install(Path("/opt/tau2/bin/tau2"), tau2cli.NVIDIA, "26.3", "")
SIERRA = tau2cli.Tau2Install(Path("/opt/sierra/.venv/bin/tau2"), tau2cli.SIERRA, "1.0.1", "")
KEY = "sk-marina-not-a-real-key-but-long-enough"
OPTIONS = Options(model="openrouter/oracle-agent", user_model="openrouter/oracle-user", task_ids=("7", "11"),
                  num_trials=2, budget_usd="3")  # fmt: skip


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_agent_effort_in_extra_body_user_effort_stated_header_on_the_agent_only() -> None:
    agent, user = llm_args(Options(domain="retail", effort="xhigh", user_effort="low", server_url="http://m:1/"))
    no_retry_on_429 = {"RateLimitErrorRetries": 0, "DefaultRetries": 3}
    assert agent == {
        "api_base": "http://m:1/v1",
        "extra_body": {"reasoning_effort": "xhigh"},
        "extra_headers": {"x-marina-eval": "benchmark=tau2-retail; mode=measure"},
        "retry_policy": no_retry_on_429,
    }
    assert user == {"api_base": "http://m:1/v1", "extra_body": {"reasoning_effort": "low"}, "retry_policy": no_retry_on_429}


@pytest.mark.django_db
def test_each_run_sends_its_own_session_on_the_agent_calls(tmp_path: Path) -> None:
    # The formations keep state per conversation within a session: two runs or two arms never meet.
    options = Options(**{**OPTIONS.__dict__, "run_dir": str(tmp_path), "arms": "obligations,obligations+argcheck", "replicates": 2})
    plan = build(options, SIERRA, name="exp")
    sessions = [json.loads(flag(plan.invocation(r, KEY).argv, "--agent-llm-args"))["extra_headers"] for r in plan.runs]
    assert [h["x-marina-session"] for h in sessions] == [r.name for r in plan.runs] == [
        "exp-obligations-r1", "exp-obligations_argcheck-r1", "exp-obligations-r2", "exp-obligations_argcheck-r2",
    ]
    assert all(h["x-marina-eval"] == "benchmark=tau2-airline; mode=measure" for h in sessions)
    assert "extra_headers" not in json.loads(flag(plan.invocation(plan.runs[0], KEY).argv, "--user-llm-args"))


@pytest.mark.django_db
def test_nvidia_run_gets_the_key_through_its_environment(tmp_path: Path) -> None:
    plan = build(Options(**{**OPTIONS.__dict__, "run_dir": str(tmp_path)}), NVIDIA, name="exp")
    assert [(r.arm.name, r.replicate, r.name) for r in plan.runs] == [("single", 1, "exp-single-r1"), ("verify", 1, "exp-verify-r1")]
    inv = plan.invocation(plan.runs[1], KEY)
    assert not any(KEY in a for a in inv.argv)
    assert inv.env[flag(inv.argv, "--agent-api-key")] == KEY == inv.env[flag(inv.argv, "--user-api-key")]
    assert flag(inv.argv, "--agent-llm") == "openai/marina/verify:openrouter/oracle-agent"
    assert flag(inv.argv, "--user-llm") == "openai/openrouter/oracle-user"
    assert "--skip-failed-samples" in inv.argv and flag(inv.argv, "--task-split-name") == "base"
    assert inv.argv[inv.argv.index("--task-ids") + 1 : inv.argv.index("--task-ids") + 3] == ["7", "11"]
    assert inv.results == tmp_path.resolve() / "exp" / "exp-verify-r1.json"
    assert json.loads(flag(inv.argv, "--agent-llm-args"))["extra_body"] == {"reasoning_effort": "high"}


@pytest.mark.django_db
def test_sierra_run_gets_the_key_in_its_llm_args(tmp_path: Path) -> None:
    plan = build(Options(**{**OPTIONS.__dict__, "run_dir": str(tmp_path), "num_tasks": None}), SIERRA, name="exp")
    inv = plan.invocation(plan.runs[0], KEY)
    assert json.loads(flag(inv.argv, "--agent-llm-args"))["api_key"] == KEY
    assert json.loads(flag(inv.argv, "--user-llm-args"))["api_key"] == KEY
    assert "--results-dir" not in inv.argv and "--agent-api-key" not in inv.argv
    assert flag(inv.argv, "--save-to") == str(tmp_path.resolve() / "exp" / "exp-single-r1")
    assert inv.results == tmp_path.resolve() / "exp" / "exp-single-r1" / "results.json"
    # The printed command never holds the key.
    assert KEY not in tau2cli.shown(inv.argv, KEY) and "<experiment key>" in tau2cli.shown(inv.argv, KEY)


@pytest.mark.django_db
def test_the_plan_lists_everything_and_no_key() -> None:
    plan = build(Options(**{**OPTIONS.__dict__, "replicates": 2, "arms": "single,verify,marina:crew"}), SIERRA, name="exp")
    text = "\n".join(render(plan))
    assert text.count("[single r") == 2 and text.count("[verify r") == 2 and text.count("[marina:crew r") == 2
    assert "6 τ² run(s) × 4 simulation(s) = 24 simulation(s)" in text
    assert "--group tau2-airline-marina:crew --require-clean" in text and "--target-kind crew" in text
    assert "then compare tau2-airline-single (A) with tau2-airline-verify (B)" in text
    assert "estimated cost: unknown" in text  # the oracle ids have no price and no history here
    assert "sk-marina" not in text


@pytest.mark.django_db
def test_estimate_from_the_ledgers_past_runs_of_the_same_models() -> None:
    # $0.60 over 4 evaluated simulations (one infrastructure error left out): $0.15 a simulation.
    make_run({"1#0": 1.0, "2#0": 0.0, "3#0": 1.0, "4#0": 1.0, "5#0": None}, cost_nanousd=600_000_000)
    plan = build(Options(**{**OPTIONS.__dict__, "arms": "single"}), NVIDIA, name="exp")
    assert (plan.estimates[0].source, plan.estimates[0].per_simulation_nanousd) == ("ledger", 150_000_000)
    assert plan.estimate_nanousd == 150_000_000 * 4


@pytest.mark.django_db
def test_estimate_from_prices_states_its_assumption() -> None:
    plan = build(Options(model="openrouter/openai/gpt-5.2", user_model="openrouter/openai/gpt-5.2",
                         arms="single,verify"), NVIDIA, name="exp")  # fmt: skip
    single, verify = plan.estimates
    assert single.source == verify.source == "prices" and "assumed per simulation" in single.note
    assert 0 < single.per_simulation_nanousd < verify.per_simulation_nanousd
    assert plan.tasks == 50  # airline's base split
    assert plan.estimate_nanousd == (single.per_simulation_nanousd + verify.per_simulation_nanousd) * 50 * 4


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"budget_usd": "lots"}, "--budget-usd must be a number of dollars, not 'lots'"),
        ({"budget_usd": "0"}, "--budget-usd must be more than 0"),
        ({"replicates": 0}, "--replicates, --num-trials and --max-concurrency must be at least 1"),
        ({"num_tasks": 3}, "give --num-tasks or --task-ids, not both"),
    ],
)
@pytest.mark.django_db
def test_unusable_options_are_refused(change: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        build(Options(**{**OPTIONS.__dict__, **change}), NVIDIA)


@pytest.mark.django_db
def test_each_replicate_has_its_own_seed_the_same_for_every_arm(tmp_path: Path) -> None:
    options = Options(**{**OPTIONS.__dict__, "run_dir": str(tmp_path), "replicates": 3, "seed": 300})
    plan = build(options, NVIDIA, name="exp")
    seeds = {(r.arm.name, r.replicate): int(flag(plan.invocation(r, KEY).argv, "--seed")) for r in plan.runs}
    assert seeds == {(arm, n): 299 + n for arm in ("single", "verify") for n in (1, 2, 3)}
    assert plan.settings()["replicate_seeds"] == [300, 301, 302]


@pytest.mark.django_db
def test_the_budget_watch_counts_unpriced_calls_at_the_fallback_price() -> None:
    from datetime import date

    from ledger.models import SpendDaily
    from repro.runner import spent_by_key

    row = {"day": date(2026, 12, 1), "key_name": "repro-x", "provider": "openrouter"}
    SpendDaily.objects.create(**row, requested_model="openrouter/priced", upstream_model="priced", calls=2,
                              prompt_tokens=500, completion_tokens=100, cost_nanousd=7_000)  # fmt: skip
    SpendDaily.objects.create(**row, requested_model="openrouter/oracle", upstream_model="oracle", calls=4,
                              unpriced_calls=4, prompt_tokens=900_000, completion_tokens=100_000)  # fmt: skip
    assert spent_by_key("repro-x") == 7_000, "without a fallback only the priced calls count"
    # 1,000,000 unpriced tokens at $2 per million: $2 more.
    assert spent_by_key("repro-x", 2_000_000_000) == 7_000 + 2_000_000_000


@pytest.mark.django_db
def test_an_estimate_at_the_fallback_price_says_so() -> None:
    # Once the per-arm figure read as a plain dollar amount, like a price.
    options = Options(**{**OPTIONS.__dict__, "arms": "single", "unpriced_usd_per_mtok": "0.5"})
    plan = build(options, NVIDIA, name="exp")
    (single,) = plan.estimates
    assert single.source == "fallback price" and "--unpriced-usd-per-mtok, not a bill" in single.note
    assert single.per_simulation_nanousd and single.per_simulation_nanousd > 0
    printed = "\n".join(render(plan))
    assert "/simulation (fallback price)" in printed and "--unpriced-usd-per-mtok, not a bill" in printed
