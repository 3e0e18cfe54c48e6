"""Who a run's model calls were made for: the agent, the user simulator, or τ² itself.

τ² makes calls of its own besides the agent's and the user simulator's: banking_knowledge's
embeddings (`text-embedding-3-large`, the knowledge base indexed before the first simulation, then
each query), its LLM reranker and sierra's NL-assertion judge. With `OPENAI_BASE_URL` pointed at
Marina they arrive under the run's key, with no seed or conversation to link them to an item, so
they are told apart by what they are not and by when they come:

    a call of one of the run's keys (the keys of its linked traces, or the import's --key), of a
    model that is neither the agent's nor the user simulator's, linked to no item of any run, made
    - while its simulations ran (first start to last end): any such call (queries, reranker, judge);
    - before its first simulation, back to the key's latest conversation call (one with τ²'s trial
      seed: the previous run's), at most HELPER_LEAD: embeddings only (the knowledge base's index);
    - after its last simulation, up to the key's next conversation call, at most HELPER_TAIL: anything
      but embeddings (the judge of the simulations that ended last).

So back-to-back runs under one key (the kit's) split the calls between them: the next run's index
is never the last run's, the last run's judge never the next run's."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Count, Max, Min, Q, QuerySet, Sum

from kernel import money
from ledger.benchmarks.links import of_keys
from ledger.models import BenchmarkItem, BenchmarkItemTrace, BenchmarkRun, Trace

# τ² builds banking's embedding index before its first simulation starts (698 documents: about a
# minute through Marina); its judge runs as each simulation ends.
HELPER_LEAD = timedelta(minutes=10)
HELPER_TAIL = timedelta(minutes=2)


@dataclass(frozen=True)
class CallerCost:
    who: str  # agent | user simulator | τ² itself
    calls: int
    cost_nanousd: int | None  # None when every call was unpriced
    unpriced: int
    models: tuple[str, ...] = ()

    @classmethod
    def summed(cls, who: str, calls: int, cost_nanousd: int, unpriced: int, models: tuple[str, ...] = ()) -> CallerCost:
        """From sums over the calls: the cost is None when every call was unpriced."""
        return cls(who, calls, None if calls and unpriced >= calls else cost_nanousd, unpriced, models)

    @property
    def shown(self) -> str:
        """As the run page shows it: cents (money.short); `exact` is its tooltip."""
        return money.with_unpriced(self.cost_nanousd, self.unpriced, fmt=money.short) if self.calls else "no calls"

    @property
    def exact(self) -> str:
        return money.with_unpriced(self.cost_nanousd, self.unpriced) if self.calls else ""


def helper_traces(
    *, keys: Sequence[str], exclude_models: Sequence[str], started: datetime, ended: datetime
) -> QuerySet[Trace]:
    """τ²'s own calls in a run's window (see the module's rule)."""
    if not keys:
        return Trace.objects.none()
    keyed = Trace.objects.filter(of_keys(keys))
    conversations = keyed.filter(conv_seed__isnull=False)  # the agent's and the user simulator's calls carry τ²'s seed
    before = conversations.filter(started_at__lt=started, started_at__gte=started - HELPER_LEAD).aggregate(
        at=Max("started_at"))["at"] or started - HELPER_LEAD  # fmt: skip
    after = conversations.filter(started_at__gt=ended, started_at__lte=ended + HELPER_TAIL).aggregate(
        at=Min("started_at"))["at"] or ended + HELPER_TAIL  # fmt: skip
    embeddings = Q(path__endswith="/embeddings")
    return (
        keyed.filter(
            Q(started_at__gte=started, started_at__lte=ended)
            | (Q(started_at__gt=before, started_at__lt=started) & embeddings)
            | (Q(started_at__gt=ended, started_at__lt=after) & ~embeddings)
        )
        .exclude(requested_model__in=[m for m in exclude_models if m])
        .exclude(pk__in=BenchmarkItemTrace.objects.values("trace_id"))
    )


def totals(traces: QuerySet[Trace], who: str, *, models: bool = False) -> CallerCost:
    t = traces.aggregate(calls=Count("pk"), cost=Sum("cost_nanousd"), unpriced=Count("pk", filter=Q(cost_nanousd=None)))
    calls, unpriced = t["calls"] or 0, t["unpriced"] or 0
    names: tuple[str, ...] = ()
    if models and calls:
        names = tuple(sorted(set(traces.values_list("requested_model", flat=True))))
    return CallerCost.summed(who, calls, int(t["cost"] or 0), unpriced, names)


# The run's linked calls per role and key, each trace once per role, in one pass over the traces:
# on PostgreSQL a trace looked up by id is looked for in every day's partition, and the agent's,
# the user simulator's and the keys' three passes were most of the run page at 2M traces.
_LINKED = f"""
SELECT l.role, t.key_name, COUNT(*), SUM(t.cost_nanousd), COUNT(*) FILTER (WHERE t.cost_nanousd IS NULL)
FROM (SELECT DISTINCT link.role, link.trace_id
      FROM {BenchmarkItemTrace._meta.db_table} link JOIN {BenchmarkItem._meta.db_table} item ON item.id = link.item_id
      WHERE item.run_id = %s) l
JOIN {Trace._meta.db_table} t ON t.id = l.trace_id
GROUP BY l.role, t.key_name"""


def by_caller(run: BenchmarkRun) -> list[CallerCost]:
    """The run's linked calls by role, and τ²'s own calls (none when the run has no linked call or times)."""
    with connection.cursor() as cursor:
        cursor.execute(_LINKED, [run.pk])
        linked = cursor.fetchall()
    out = []
    for role, who in ((BenchmarkItemTrace.Role.AGENT, "agent"), (BenchmarkItemTrace.Role.USER, "user simulator")):
        rows = [row for row in linked if row[0] == role]
        calls, unpriced = sum(row[2] for row in rows), sum(row[4] for row in rows)
        cost = sum(int(row[3] or 0) for row in rows)
        out.append(CallerCost.summed(who, calls, cost, unpriced))
    keys = sorted({key for _, key, *_ in linked if key})  # the keys the run's linked calls were made with
    if run.started_at is not None and run.ended_at is not None and keys:
        helpers = helper_traces(keys=keys, exclude_models=[run.agent_model, run.user_model],
                                started=run.started_at, ended=run.ended_at)  # fmt: skip
        out.append(totals(helpers, "τ² itself", models=True))
    return out
