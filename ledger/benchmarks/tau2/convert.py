"""A parsed τ² results file as a ledger (ledger.benchmarks.ledgerfile)."""
from __future__ import annotations

from ledger.benchmarks.items import LedgerItem, LedgerRun, Participant
from ledger.benchmarks.ledgerfile import Ledger
from ledger.benchmarks.tau2.results import Side, Tau2Results, parse_time


def _participant(side: Side) -> Participant:
    return Participant(llm=side.llm, model=side.served, implementation=side.implementation, args=side.args)


def to_ledger(results: Tau2Results) -> Ledger:
    """One item per simulation, `<task>#<trial>`; the run's window is the
    earliest simulation start to the latest simulation end."""
    starts = [(parse_time(s.start_time), s.start_time) for s in results.simulations]
    ends = [(parse_time(s.end_time), s.end_time) for s in results.simulations]
    first = min((p for p in starts if p[0] is not None), default=(None, None))[1]
    last = max((p for p in ends if p[0] is not None), default=(None, None))[1]
    run = LedgerRun(
        benchmark=f"tau2-{results.domain}",
        domain=results.domain,
        num_trials=results.num_trials,
        agent=_participant(results.agent),
        user=_participant(results.user),
        task_split=results.task_split,
        seed=results.seed,
        max_steps=results.max_steps,
        max_errors=results.max_errors,
        tau2={"distribution": results.distribution, "git_commit": results.git_commit},
        timestamp=results.timestamp,
        started_at=first,
        ended_at=last,
        task_ids=results.task_ids,
        retrieval_config=results.retrieval_config,
        retrieval_config_kwargs=results.retrieval_config_kwargs,
    )
    items = [
        LedgerItem(
            id=s.item_id,
            task_id=s.task_id,
            trial=s.trial,
            reward=s.reward,
            termination_reason=s.termination_reason,
            infra_error=s.infra_error,
            skipped=s.skipped,
            duration_s=s.duration_s,
            agent_cost_usd=s.agent_cost_usd,
            user_cost_usd=s.user_cost_usd,
            start_time=s.start_time,
            end_time=s.end_time,
            reward_breakdown=s.breakdown,
            seed=s.seed,
            opening_agent=s.opening_agent,
            opening_user=s.opening_user,
        )
        for s in results.simulations
    ]
    # sha256 is the import key (the JSON content's, so an upload of the same file is the same run);
    # file_sha256, the bytes', matches runs imported before the key was the content's.
    source = {
        "kind": "tau2-results", "name": results.path.name, "sha256": results.content_sha256,
        "file_sha256": results.sha256, "bytes": results.size_bytes,
    }  # fmt: skip
    return Ledger(run=run, items=items, source=source, warnings=list(results.warnings), num_actions=results.num_actions)
