"""The records a benchmark run becomes, whatever it was read from (a ledger file,
a τ² results file): the run's settings, its participants and one item per
simulation. Plain dataclasses, so the readers, the board rules and the writers
share them without importing each other."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ledger.benchmarks import metrics

INFRA_ERROR = "infrastructure_error"


@dataclass
class Participant:
    llm: str  # as the harness was told (LiteLLM id)
    model: str  # as served: LiteLLM's `openai/` prefix dropped
    implementation: str = ""
    args: dict[str, Any] = field(default_factory=dict)  # credentials removed


@dataclass
class LedgerRun:
    benchmark: str  # tau2-<domain>
    domain: str
    num_trials: int
    agent: Participant
    user: Participant
    task_split: str | None = None  # as recorded by the harness; None when it records none
    seed: int | None = None
    max_steps: int | None = None
    max_errors: int | None = None
    tau2: dict[str, str] = field(default_factory=dict)  # distribution, git_commit
    timestamp: str | None = None  # the harness's own run timestamp
    started_at: str | None = None  # earliest simulation start (ISO, as the harness wrote it)
    ended_at: str | None = None  # latest simulation end
    task_ids: list[str] | None = None  # every task the run was given
    judge: str = ""  # who scored the items, when the file says (the original's config.judge)
    # banking_knowledge: τ²'s --retrieval-config and its kwargs (credentials removed); None elsewhere.
    retrieval_config: str | None = None
    retrieval_config_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class LedgerItem:
    id: str  # <task>#<trial>
    task_id: str
    trial: int
    reward: float | None
    termination_reason: str
    infra_error: bool = False
    skipped: bool = False
    duration_s: float | None = None
    agent_cost_usd: float | None = None
    user_cost_usd: float | None = None
    start_time: str | None = None
    end_time: str | None = None
    reward_breakdown: dict[str, Any] = field(default_factory=dict)
    # What links the item to Marina's traces (kernel/conversation.py): the trial's
    # seed and the opening's hash as the agent's and the user simulator's requests carry it.
    seed: int | None = None
    opening_agent: str = ""
    opening_user: str = ""

    @property
    def correct(self) -> bool:
        return metrics.is_successful(self.reward)
