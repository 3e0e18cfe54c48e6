"""Small explicit builders for benchmark runs and items (no factory library)."""
from __future__ import annotations

import hashlib
import itertools
import json
from typing import Any

from ledger.benchmarks.metrics import is_successful
from ledger.models import BenchmarkItem, BenchmarkRun
from tests.ledger.tau2files import FIXTURES

_serial = itertools.count(1)


def fixture_rewards(name: str) -> dict[str, float | None]:
    """Per-item rewards τ² computed for a fixture (`airline-oracle`, ...)."""
    data = json.loads((FIXTURES / f"{name}.expected.json").read_text())
    return dict(data["rewards"])


def fixture_expected(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.expected.json").read_text())


def make_run(rewards: dict[str, float | None], trial_seeds: dict[int, int] | None = None, **fields: Any) -> BenchmarkRun:
    """A run with one item per `<task>#<trial>` reward; a None reward is an
    infrastructure error (not evaluated). Other run fields default to the
    fixtures' common settings and can be overridden."""
    trials = {int(item_id.rsplit("#", 1)[1]) for item_id in rewards}
    infra = sum(r is None for r in rewards.values())
    defaults: dict[str, Any] = {
        "benchmark": "tau2-airline",
        "domain": "airline",
        "target_kind": BenchmarkRun.TargetKind.MODEL,
        "target": "openrouter/oracle-agent",
        "seed": 300,
        "task_split": "base",
        "num_trials": len(trials),
        "agent_model": "openrouter/oracle-agent",
        "user_model": "openrouter/oracle-user",
        "user_args": {"temperature": 0.0},
        "tau2_version": "26.3",
        "source_sha256": hashlib.sha256(f"run-{next(_serial)}".encode()).hexdigest(),
        "simulations": len(rewards),
        "infra_errors": infra,
    }
    defaults.update(fields)
    run = BenchmarkRun.objects.create(**defaults)
    BenchmarkItem.objects.bulk_create(
        BenchmarkItem(
            run=run,
            item_id=item_id,
            task_id=item_id.rsplit("#", 1)[0],
            trial=int(item_id.rsplit("#", 1)[1]),
            reward=reward,
            correct=is_successful(reward),
            infra_error=reward is None,
            seed=(trial_seeds or {}).get(int(item_id.rsplit("#", 1)[1])),
        )
        for item_id, reward in rewards.items()
    )
    return run


def flipped(rewards: dict[str, float | None], *item_ids: str) -> dict[str, float | None]:
    """A copy with the listed items' outcomes flipped (1.0 <-> 0.0)."""
    out = dict(rewards)
    for item_id in item_ids:
        out[item_id] = 0.0 if is_successful(out[item_id]) else 1.0
    return out
