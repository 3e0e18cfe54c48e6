"""What an experiment is expected to cost, before anything runs.

Per arm, the cost of one simulation is taken from the ledger when it holds
priced runs of the same agent and user model ids (the same domain first, then
any), else from price tables with a stated assumption about a simulation's
calls and tokens, else it is unknown (then only the watch during the run
enforces the budget)."""
from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Sum

from ledger.models import BenchmarkRun
from passthru.pricing import Usage, price
from repro.arms import Arm

# A stated assumption, used only without history: one τ² text simulation of a
# customer-service domain takes about this many calls and tokens on each side.
AGENT_CALLS, AGENT_PROMPT, AGENT_COMPLETION = 12, 8_000, 600
USER_CALLS, USER_PROMPT, USER_COMPLETION = 12, 3_000, 150
ASSUMPTION = (
    f"assumed per simulation: agent {AGENT_CALLS} calls × {AGENT_PROMPT:,} prompt + {AGENT_COMPLETION} completion "
    f"tokens, user {USER_CALLS} × {USER_PROMPT:,} + {USER_COMPLETION}; verify's review as one more agent call "
    "and a third of a revision; obligations/argcheck as 0.4/0.2 more calls"
)
# Extra agent-model calls per agent call that each arm makes (beyond verify's review, priced apart).
_EXTRA_CALLS = {"single": 0.0, "verify": 1 / 3, "obligations": 0.4, "argcheck": 0.2, "obligations+argcheck": 0.6,
                "lessons": 0.0}  # fmt: skip


@dataclass(frozen=True)
class ArmEstimate:
    arm: str
    per_simulation_nanousd: int | None
    source: str  # ledger | prices | unknown
    note: str


def from_ledger(domain: str, agent_model: str, user_model: str) -> tuple[int, int] | None:
    """(cost, evaluated simulations) of the priced past runs of these models: this domain's, else any."""
    runs = BenchmarkRun.objects.filter(
        agent_model=agent_model, user_model=user_model, cost_nanousd__isnull=False, status="complete"
    )
    for scope in (runs.filter(domain=domain), runs):
        totals = scope.aggregate(cost=Sum("cost_nanousd"), sims=Sum("simulations"), infra=Sum("infra_errors"))
        sims = (totals["sims"] or 0) - (totals["infra"] or 0)
        if sims > 0 and totals["cost"]:
            return int(totals["cost"]), sims
    return None


def _call_price(model: str, prompt: int, completion: int) -> int | None:
    """One call's price from the tables, for a `<provider>/<model>` id ('' if none)."""
    provider, _, upstream = model.partition("/")
    if not upstream:
        return None
    usage = Usage(prompt_tokens=prompt, completion_tokens=completion)
    price(usage, provider=provider, upstream_model=upstream, reported=None)
    return usage.cost_nanousd


def from_prices(arm: Arm, model: str, checker: str | None, user_model: str) -> int | None:
    if arm.name not in _EXTRA_CALLS:
        return None  # a crew: what it calls is not known here
    agent = _call_price(model, AGENT_PROMPT, AGENT_COMPLETION)
    user = _call_price(user_model, USER_PROMPT, USER_COMPLETION)
    if agent is None or user is None:
        return None
    per_call = agent * (1 + _EXTRA_CALLS[arm.name])
    if arm.name == "verify":
        review = _call_price(checker or model, AGENT_PROMPT, AGENT_COMPLETION)
        if review is None:
            return None
        per_call += review
    return round(AGENT_CALLS * per_call + USER_CALLS * user)


def estimate_arm(arm: Arm, *, domain: str, model: str, checker: str | None, user_model: str) -> ArmEstimate:
    past = from_ledger(domain, arm.agent_model, user_model)
    if past is not None:
        cost, sims = past
        return ArmEstimate(arm.name, round(cost / sims), "ledger", f"mean of {sims} past simulation(s) in the ledger")
    priced = from_prices(arm, model, checker, user_model)
    if priced is not None:
        return ArmEstimate(arm.name, priced, "prices", ASSUMPTION)
    return ArmEstimate(arm.name, None, "unknown", "no past runs of these models and no price for them")
