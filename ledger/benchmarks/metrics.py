"""τ²'s own figures: mean reward and pass^k, computed exactly as
tau2.metrics.agent_metrics does, with infrastructure errors excluded (the
behaviour τ² intends; see tests/fixtures/tau2/README.md)."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from math import comb
from typing import Protocol


class Outcome(Protocol):
    # Read-only members, so that a frozen dataclass or a property (Simulation.infra_error) fits.
    @property
    def task_id(self) -> str: ...
    @property
    def reward(self) -> float | None: ...
    @property
    def infra_error(self) -> bool: ...


def is_successful(reward: float | None) -> bool:
    """τ²'s success test: reward within 1e-6 of 1."""
    return reward is not None and 1 - 1e-6 <= reward <= 1 + 1e-6


def pass_hat_k(num_trials: int, success_count: int, k: int) -> float:
    """comb(c, k) / comb(n, k), per task (arXiv 2406.12045)."""
    if num_trials < k:
        raise ValueError(f"pass^{k} needs at least {k} trials, got {num_trials}")
    return comb(success_count, k) / comb(num_trials, k)


@dataclass
class Summary:
    simulations: int  # evaluated simulations (infrastructure errors excluded)
    infra_errors: int
    tasks: int
    mean_reward: float | None
    pass_hat_k: list[float]  # index 0 is pass^1

    @property
    def max_k(self) -> int:
        return len(self.pass_hat_k)


def summarize(items: Iterable[Outcome]) -> Summary:
    """Mean reward over evaluated simulations; pass^k for k = 1 .. the smallest
    number of evaluated trials of any task, each the mean over tasks."""
    by_task: dict[str, list[bool]] = defaultdict(list)
    rewards: list[float] = []
    infra = 0
    for item in items:
        if item.infra_error:
            infra += 1
            continue
        reward = item.reward if item.reward is not None else 0.0
        rewards.append(reward)
        by_task[item.task_id].append(is_successful(reward))
    max_k = min((len(v) for v in by_task.values()), default=0)
    curve = [
        sum(pass_hat_k(len(v), sum(v), k) for v in by_task.values()) / len(by_task) for k in range(1, max_k + 1)
    ]
    return Summary(
        simulations=len(rewards),
        infra_errors=infra,
        tasks=len(by_task),
        mean_reward=sum(rewards) / len(rewards) if rewards else None,
        pass_hat_k=curve,
    )
