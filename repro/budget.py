"""What an experiment is expected to cost, before anything runs.

Per arm, the cost of one simulation is taken from the ledger when it holds
priced runs of the same agent and user model ids (the same domain first, then
any), else from price tables with a stated assumption about a simulation's
calls and tokens, else it is unknown (then only the watch during the run
enforces the budget)."""
from __future__ import annotations

from dataclasses import dataclass

from django.db.models import F, Q, Sum

from ledger.models import BenchmarkRun, SpendDaily
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
    source: str  # ledger | prices | fallback price | unknown
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


def _table_price(model: str, prompt: int, completion: int) -> int | None:
    """One call's price from the tables, for a `<provider>/<model>` id (None if unknown)."""
    provider, _, upstream = model.partition("/")
    if not upstream:
        return None
    usage = Usage(prompt_tokens=prompt, completion_tokens=completion)
    price(usage, provider=provider, upstream_model=upstream, reported=None)
    return usage.cost_nanousd


def at_fallback(tokens: int, fallback_per_mtok: int | None) -> int | None:
    """Nano-dollars for `tokens` at the fallback price (nano-dollars per million tokens)."""
    return None if fallback_per_mtok is None else tokens * fallback_per_mtok // 1_000_000


def _call_price(model: str, prompt: int, completion: int, fallback_per_mtok: int | None = None) -> int | None:
    """The tables' price, else the fallback's for the call's tokens, else None."""
    priced = _table_price(model, prompt, completion)
    return priced if priced is not None else at_fallback(prompt + completion, fallback_per_mtok)


def has_price(model: str) -> bool:
    """Whether a call to `model` can be priced: the tables know it, or Marina has
    recorded a priced call to it (a provider that reports its cost, e.g. OpenRouter),
    or the ledger holds a fully priced run of it."""
    if _table_price(model, 1000, 100) is not None:
        return True
    if SpendDaily.objects.filter(requested_model=model, calls__gt=F("unpriced_calls")).exists():
        return True
    priced_runs = BenchmarkRun.objects.filter(cost_nanousd__isnull=False, unpriced_calls=0, status="complete")
    return priced_runs.filter(Q(agent_model=model) | Q(user_model=model)).exists()


def from_prices(arm: Arm, model: str, checker: str | None, user_model: str, fallback_per_mtok: int | None = None) -> int | None:
    if arm.name not in _EXTRA_CALLS:
        return None  # a crew: what it calls is not known here
    agent = _call_price(model, AGENT_PROMPT, AGENT_COMPLETION, fallback_per_mtok)
    user = _call_price(user_model, USER_PROMPT, USER_COMPLETION, fallback_per_mtok)
    if agent is None or user is None:
        return None
    per_call = agent * (1 + _EXTRA_CALLS[arm.name])
    if arm.name == "verify":
        review = _call_price(checker or model, AGENT_PROMPT, AGENT_COMPLETION, fallback_per_mtok)
        if review is None:
            return None
        per_call += review
    return round(AGENT_CALLS * per_call + USER_CALLS * user)


def estimate_arm(
    arm: Arm, *, domain: str, model: str, checker: str | None, user_model: str, fallback_per_mtok: int | None = None
) -> ArmEstimate:
    past = from_ledger(domain, arm.agent_model, user_model)
    if past is not None:
        cost, sims = past
        return ArmEstimate(arm.name, round(cost / sims), "ledger", f"mean of {sims} past simulation(s) in the ledger")
    priced = from_prices(arm, model, checker, user_model, fallback_per_mtok)
    if priced is not None:
        involved = [model, user_model, *([checker or model] if arm.name == "verify" else [])]
        if fallback_per_mtok is not None and any(_table_price(m, 1000, 100) is None for m in involved):
            return ArmEstimate(arm.name, priced, "fallback price",
                               f"models with no price at --unpriced-usd-per-mtok, not a bill; {ASSUMPTION}")  # fmt: skip
        return ArmEstimate(arm.name, priced, "prices", ASSUMPTION)
    return ArmEstimate(arm.name, None, "unknown", "no past runs of these models and no price for them")
