"""τ²'s own figures: mean reward and pass^k, computed exactly as
tau2.metrics.agent_metrics does, with infrastructure errors excluded (the
behaviour τ² intends; see tests/fixtures/tau2/README.md).

Exactly means to the last bit, so in τ²'s order of operations: τ² takes
pandas means, which sum with numpy's pairwise summation (`mean_of`), of the
per-task pass^k in the order of its per-task table: task ids sorted as text
(pandas' groupby), then by the task's number of expected actions (its
`sort_values`, stable for the sizes τ² runs). A plain left-to-right sum
differs in the last bit (pass^2 of the airline fixture: 0.5166666666666666
against τ²'s 0.5166666666666667)."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
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


_PAIRWISE_BLOCK = 128  # numpy's PW_BLOCKSIZE


def pairwise_sum(values: Sequence[float]) -> float:
    """numpy's float64 sum (pairwise_sum in loops_utils.h.src): below 8 values
    left to right; up to 128 in 8 interleaved accumulators combined as a
    tree, the rest added after; beyond, split at a multiple of 8 and recurse."""
    n = len(values)
    if n < 8:
        total = 0.0
        for v in values:
            total += v
        return total
    if n <= _PAIRWISE_BLOCK:
        r = [float(v) for v in values[:8]]
        i = 8
        whole = n - n % 8
        while i < whole:
            for j in range(8):
                r[j] += values[i + j]
            i += 8
        total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for v in values[i:]:
            total += v
        return total
    half = n // 2
    half -= half % 8
    return pairwise_sum(values[:half]) + pairwise_sum(values[half:])


def mean_of(values: Sequence[float]) -> float:
    """pandas' Series.mean() of float64 values: numpy's sum over the count."""
    return pairwise_sum(values) / len(values)


def task_order(task_ids: Iterable[str], num_actions: Mapping[str, int] | None = None) -> list[str]:
    """The order of τ²'s per-task table: ids sorted as text, then (stably) by
    the number of expected actions when the file says it."""
    ordered = sorted(task_ids)
    if num_actions:
        ordered.sort(key=lambda t: num_actions.get(t, 0))
    return ordered


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


def summarize(items: Iterable[Outcome], num_actions: Mapping[str, int] | None = None) -> Summary:
    """Mean reward over evaluated simulations; pass^k for k = 1 .. the smallest
    number of evaluated trials of any task, each the mean over tasks, summed
    in τ²'s order (`num_actions`: each task's expected actions, when known)."""
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
    order = task_order(by_task, num_actions)
    curve = [mean_of([pass_hat_k(len(by_task[t]), sum(by_task[t]), k) for t in order]) for k in range(1, max_k + 1)]
    return Summary(
        simulations=len(rewards),
        infra_errors=infra,
        tasks=len(by_task),
        mean_reward=mean_of(rewards) if rewards else None,
        pass_hat_k=curve,
    )
