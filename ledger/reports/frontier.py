"""The cost–reward frontier: every run (or replicate group) of one benchmark as a
point, x = what Marina's own spend says a simulation cost, y = pass^k with its
interval, and the points no other point beats on both (the Pareto frontier).

The report page (/reports/frontier/), `/api/frontier` and `manage.py frontier`
all print `as_json(frontier(...))` or lay out the same `Frontier`, so the three
give the same figures.

- **Cost per simulation** is Marina's spend over the evaluated simulations: a
  run imported with `--cost-from-spend` (cost source `spend`) has it as its
  cost; otherwise it is the sum of the costs of the traces linked to the run's
  items (ledger/benchmarks/links.py), known only when every item is linked and
  none of its calls is unpriced. Anything else is **unknown** (None), never 0:
  a cost given at import (`cli`) or τ²'s LiteLLM estimate is not Marina's spend.
- **pass^k** is τ²'s (ledger.benchmarks.metrics.summarize) over the point's
  evaluated items, pooled over a group's valid runs of one target (a group the
  kit filed several models under is one point per model). Its interval is the
  95 % normal interval over tasks (the per-task pass^k values' mean ± 1.96
  standard errors, clamped to [0, 1]): tasks are the unit τ² averages over, and
  unlike the run page's bootstrap it costs nothing per point, so a page of a
  hundred runs stays fast. With fewer than SMALL_TASKS tasks, or tasks that all
  scored alike, that interval understates the uncertainty (two tasks at 0.5
  give [0.5, 0.5]); it is then widened to the Wilson score interval of the mean
  over as many tasks, so no interval on few tasks has zero width.
- **Like with like**: points on one frontier share what COMPARED names (the
  task split, the trials per task, the retrieval config) and the task set itself. The frontier is
  drawn over the points that share the most tasks (then: the most points, the
  most simulations, the newest point's); every other point is listed apart with the reason
  (`apart`: "1 task, not the frontier's 50"), never on it, so a run on a task
  subset never pushes a full run off.
- **The frontier**: a point with a known cost is on it when no other known-cost
  point of its cohort costs no more and scores at least as well, one of the two
  strictly. Points of unknown cost are listed and drawn apart, never on it.

At scale: the newest `limit` runs matching the filters (default 100), or the
newest `limit` groups (default 20) with all their runs, are read, and their items
totalled in the database in one statement over a covering index (per run, and per
point how many tasks had each (successes, evaluated) pair), so a page reads a few
hundred rows and runs the same dozen queries whatever the ledger holds."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date
from math import sqrt
from typing import Any

from django.db import connection
from django.db.models import Count, Max, Q

from kernel import money
from ledger.benchmarks.metrics import pass_hat_k
from ledger.benchmarks.power import distinguish
from ledger.benchmarks.stats import SMALL_TASKS, Z95, at_least_wilson
from ledger.models import BenchmarkItem, BenchmarkRun, ExperimentRun

# The run settings two points must share to be on one frontier (with the task set): field -> name.
COMPARED = {
    "task_split": "split",
    "num_trials": "trials",
    "retrieval_config": "retrieval config",  # banking_knowledge's; blank elsewhere
}
_BLANK = {"retrieval config": "none"}  # how a blank setting reads (else "unrecorded")
DEFAULT_LIMIT = 100  # runs; with by="group", GROUP_LIMIT groups (each with all its runs)
GROUP_LIMIT = 20
MAX_LIMIT = 500
MAX_K = 16


class FrontierError(ValueError):
    """A request the frontier cannot answer (an unknown benchmark, k out of range)."""


@dataclass
class FrontierPoint:
    key: str  # "run:12" or "group:<name>"
    label: str  # target · arm
    target: str
    arm: str  # the experiment's arm, else the run's group, else its label
    group: str
    run_ids: list[int]
    simulations: int  # evaluated
    tasks: int
    cost_nanousd: int | None  # Marina's spend of the point's runs, None when unknown
    cost_per_simulation_nanousd: int | None
    cost_basis: str  # spend | linked traces | why it is unknown
    value: float | None  # pass^k
    lo: float | None
    hi: float | None
    on_frontier: bool = False
    settings: dict[str, Any] = field(default_factory=dict)  # COMPARED's values, "mixed" where members differ
    task_set: frozenset[str] = frozenset()
    apart: str = ""  # why it is not on the frontier's cohort ('' when it is)

    @property
    def cost_per_simulation_usd(self) -> Any:
        return money.to_usd(self.cost_per_simulation_nanousd)


@dataclass
class Frontier:
    benchmark: str
    k: int
    by: str  # run | group
    points: list[FrontierPoint]
    total: int  # runs (or groups) matching the filters, before the limit
    limit: int
    benchmarks: list[str] = field(default_factory=list)

    @property
    def frontier(self) -> list[FrontierPoint]:
        return sorted((p for p in self.points if p.on_frontier), key=lambda p: p.cost_per_simulation_nanousd or 0)

    @property
    def unknown_cost(self) -> list[FrontierPoint]:
        return [p for p in self.points if p.cost_per_simulation_nanousd is None]

    @property
    def shown_apart(self) -> list[FrontierPoint]:
        return [p for p in self.points if p.apart]

    @property
    def cohort(self) -> str:
        """What the frontier's points share, in words."""
        ref = next((p for p in self.points if p.value is not None and not p.apart), None)
        if ref is None:
            return ""
        settings = ", ".join(f"{name} {_shown(ref.settings.get(name), name)}" for name in COMPARED.values())
        return f"{len(ref.task_set)} task(s), {settings}"


def benchmarks() -> list[str]:
    return sorted(BenchmarkRun.objects.order_by().values_list("benchmark", flat=True).distinct())


def frontier(
    *,
    benchmark: str = "",
    domain: str = "",
    group: str = "",
    since: date | None = None,
    until: date | None = None,
    k: int = 1,
    by: str = "run",
    limit: int | None = None,
    visible: Q | None = None,
) -> Frontier:
    """The points of one benchmark (default: the one with the most runs) matching
    the filters, of the runs `visible` picks (a key's: ledger/benchmarks/owners.py)."""
    if not 1 <= k <= MAX_K:
        raise FrontierError(f"k must be between 1 and {MAX_K}, not {k}")
    if by not in ("run", "group"):
        raise FrontierError(f"by must be 'run' or 'group', not {by!r}")
    if limit is None:
        limit = GROUP_LIMIT if by == "group" else DEFAULT_LIMIT
    if not 1 <= limit <= MAX_LIMIT:
        raise FrontierError(f"limit must be between 1 and {MAX_LIMIT}, not {limit}")
    known = benchmarks()
    runs = BenchmarkRun.objects.exclude(status="invalid")  # an invalid run's figures mean nothing
    if visible is not None:
        runs = runs.filter(visible)
    if domain:
        runs = runs.filter(domain=domain)
    if not benchmark:  # the benchmark with the most runs (of a tie, the newest run's)
        counted = runs.order_by().values("benchmark").annotate(n=Count("pk"), newest=Max("created_at"))
        busiest = counted.order_by("-n", "-newest").values_list("benchmark", flat=True).first()
        benchmark = busiest or ""
    elif benchmark not in known:
        raise FrontierError(f"No runs of benchmark {benchmark!r}.")
    runs = runs.filter(benchmark=benchmark)
    if group:
        runs = runs.filter(group=group)
    if since:
        runs = runs.filter(created_at__date__gte=since)
    if until:
        runs = runs.filter(created_at__date__lte=until)
    if by == "group":
        groups = runs.exclude(group="").order_by().values("group").annotate(newest=Max("created_at"))
        total = groups.count()
        names = [g["group"] for g in groups.order_by("-newest")[:limit]]
        chosen = list(runs.filter(group__in=names).order_by("-created_at", "-pk").only(*_POINT_FIELDS))
    else:
        total = runs.count()
        chosen = list(runs.order_by("-created_at", "-pk").only(*_POINT_FIELDS)[:limit])
    points = _points(chosen, k=k, by=by)
    _set_apart(points)
    _mark_frontier(points)
    return Frontier(benchmark=benchmark, k=k, by=by, points=points, total=total, limit=limit, benchmarks=known)


# What a point reads of its runs (not their settings, arguments and reasons, JSON decoded for nothing).
_POINT_FIELDS = ("id", "group", "label", "target", "cost_source", "cost_nanousd", "created_at", *COMPARED)


@dataclass
class _RunFigures:
    run: BenchmarkRun
    items: int = 0
    linked: int = 0
    unpriced: int = 0
    trace_cost: int = 0


Histogram = dict[tuple[int, int], int]  # (successes, evaluated) of a task -> how many tasks


def _points(chosen: list[BenchmarkRun], *, k: int, by: str) -> list[FrontierPoint]:
    if not chosen:
        return []
    ids = [r.pk for r in chosen]
    figures = {r.pk: _RunFigures(r) for r in chosen}
    tasks: dict[str, Histogram] = defaultdict(dict)  # point ("12" or the group) -> its tasks' histogram
    for kind, key, items, linked, unpriced, cost, ok, n, count in _item_totals(ids, by=by):
        if kind == "run":
            f = figures[int(key)]
            f.items, f.linked, f.unpriced, f.trace_cost = int(items), int(linked), int(unpriced), int(cost)
        else:
            tasks[key][(int(ok), int(n))] = int(count)
    arms = dict(
        ExperimentRun.objects.filter(run_id__in=ids).values_list("run_id", "arm")
    )  # an experiment's arm names the point better than its group
    task_sets: dict[int, set[str]] = defaultdict(set)
    # order_by(): the model's ordering (its run's, then trial) would be selected too, making every item distinct.
    pairs = BenchmarkItem.objects.filter(run_id__in=ids).order_by().values_list("run_id", "task_id").distinct()
    for run_id, task_id in pairs:
        task_sets[run_id].add(task_id)
    if by == "run":
        return [
            _point(f"run:{f.run.pk}", [f], tasks[str(f.run.pk)], k, arms, task_sets) for f in figures.values()
        ]
    by_group: dict[tuple[str, str], list[_RunFigures]] = defaultdict(list)
    for f in figures.values():
        by_group[(f.run.group, f.run.target)].append(f)  # a group pools the replicates of one target
    targets_of: dict[str, int] = defaultdict(int)
    for name, _ in by_group:
        targets_of[name] += 1
    return [
        _point(f"group:{name}" if targets_of[name] == 1 else f"group:{name}|{target}", members,
               tasks[f"{name}|{target}"], k, arms, task_sets)
        for (name, target), members in by_group.items()
    ]  # fmt: skip


# Items per (run, task) in one pass over the covering index item_run_task_totals (its
# columns are all this reads: an index-only scan in (run, task) order). What comes back is
# small whatever the runs hold: per run its totals, and per point (a run, or a group pooling
# its runs' trials of each task) how many tasks had each (successes, evaluated) pair, which
# is all pass^k and its interval over tasks need: a few rows a point, not one a task.
_TOTALS = f"""
WITH per_task AS (
    SELECT run_id, task_id, COUNT(*) AS items,
           COUNT(*) FILTER (WHERE NOT infra_error) AS n,
           COUNT(*) FILTER (WHERE correct AND NOT infra_error) AS ok,
           COUNT(*) FILTER (WHERE link_status = 'linked') AS linked,
           COALESCE(SUM(trace_unpriced), 0) AS unpriced, COALESCE(SUM(trace_cost_nanousd), 0) AS cost
    FROM {BenchmarkItem._meta.db_table} WHERE run_id IN ({{ids}}) GROUP BY run_id, task_id
), point_task AS ({{point_task}})
SELECT 'run', CAST(run_id AS VARCHAR(190)), SUM(items), SUM(linked), SUM(unpriced), SUM(cost), NULL, NULL, NULL
FROM per_task GROUP BY run_id
UNION ALL
SELECT 'tasks', point, NULL, NULL, NULL, NULL, ok, n, COUNT(*) FROM point_task WHERE n > 0 GROUP BY point, ok, n
"""
_RUN_TASKS = "SELECT CAST(run_id AS VARCHAR(190)) AS point, ok, n FROM per_task"
_GROUP_TASKS = f"""
    SELECT r."group" || '|' || r.target AS point, SUM(t.ok) AS ok, SUM(t.n) AS n
    FROM per_task t JOIN {BenchmarkRun._meta.db_table} r ON r.id = t.run_id GROUP BY r."group", r.target, t.task_id"""


def _item_totals(ids: list[int], *, by: str) -> list[tuple[Any, ...]]:
    """One statement over the chosen runs' items: ("run", run id, items, linked,
    unpriced calls, linked cost, -, -, -) per run and ("tasks", point, -, -, -, -,
    successes, evaluated, tasks) per point and pair. A raw statement: a CTE and a
    UNION the ORM does not write."""
    sql = _TOTALS.format(ids=", ".join(["%s"] * len(ids)), point_task=_GROUP_TASKS if by == "group" else _RUN_TASKS)
    with connection.cursor() as cursor:
        cursor.execute(sql, ids)
        return list(cursor.fetchall())


def _run_cost(f: _RunFigures) -> tuple[int | None, str]:
    """Marina's spend for one run, or None with the reason."""
    if f.run.cost_source == "spend" and f.run.cost_nanousd is not None:
        return f.run.cost_nanousd, "spend"
    if not f.items:
        return None, "unknown: no items"
    if f.linked < f.items:
        return None, f"unknown: {f.items - f.linked} of {f.items} items not linked to Marina's traces"
    if f.unpriced:
        return None, f"unknown: {f.unpriced} unpriced call(s)"
    return f.trace_cost, "linked traces"


def _point(
    key: str, members: list[_RunFigures], tasks: Histogram, k: int, arms: dict[int, str], task_sets: dict[int, set[str]]
) -> FrontierPoint:
    first = members[0].run
    simulations = sum(n * count for (_, n), count in tasks.items())
    costs = [_run_cost(f) for f in members]
    unknown = next((basis for cost, basis in costs if cost is None), "")
    cost = None if unknown else sum(c for c, _ in costs if c is not None)
    basis = unknown or " + ".join(sorted({b for _, b in costs}))
    per_sim = None if cost is None or not simulations else (cost + simulations // 2) // simulations
    value, lo, hi = pass_k_histogram_interval(tasks, k)
    arm = arms.get(first.pk) or first.group or first.label or f"run #{first.pk}"
    targets = sorted({f.run.target for f in members})
    settings = {}
    for attr, name in COMPARED.items():
        values = {getattr(f.run, attr) for f in members}
        settings[name] = values.pop() if len(values) == 1 else "mixed"
    member_sets = {frozenset(task_sets.get(f.run.pk, ())) for f in members}
    return FrontierPoint(
        key=key, label=f"{' / '.join(targets)} · {arm}", target=" / ".join(targets), arm=arm, group=first.group,
        run_ids=sorted(f.run.pk for f in members), simulations=simulations, tasks=sum(tasks.values()),
        cost_nanousd=cost, cost_per_simulation_nanousd=per_sim, cost_basis=basis, value=value, lo=lo, hi=hi,
        settings=settings, task_set=frozenset().union(*member_sets),
        apart="pools runs of different task sets" if len(member_sets) > 1 else "",
    )  # fmt: skip


def pass_k_interval(per_task: list[list[int]], k: int) -> tuple[float | None, float | None, float | None]:
    """τ²'s pass^k (mean over tasks) and its 95 % normal interval over tasks from
    each task's [successes, evaluated]; None when a task has fewer than k
    evaluated trials (τ² caps k the same way)."""
    tasks: Histogram = defaultdict(int)
    for ok, n in per_task:
        tasks[(ok, n)] += 1
    return pass_k_histogram_interval(tasks, k)


def pass_k_histogram_interval(tasks: Histogram, k: int) -> tuple[float | None, float | None, float | None]:
    """`pass_k_interval` from how many tasks had each (successes, evaluated) pair:
    a task's pass^k depends on nothing else, so each distinct pair is computed once."""
    if not tasks or min(n for _, n in tasks) < k:
        return None, None, None
    values = {pair: pass_hat_k(pair[1], pair[0], k) for pair in tasks}
    t = sum(tasks.values())
    mean = sum(values[pair] * count for pair, count in tasks.items()) / t
    if t < 2:
        return mean, 0.0, 1.0  # one task: nothing known about the spread
    sd = sqrt(sum(count * (values[pair] - mean) ** 2 for pair, count in tasks.items()) / (t - 1))
    half = Z95 * sd / sqrt(t)
    lo, hi = at_least_wilson(mean, max(0.0, mean - half), min(1.0, mean + half), t)
    return mean, lo, hi


def _shown(value: Any, name: str = "") -> str:
    return _BLANK.get(name, "unrecorded") if value in ("", None) else str(value)


def _facts(p: FrontierPoint) -> tuple[Any, ...]:
    return (p.task_set, *(p.settings.get(name) for name in COMPARED.values()))


def _set_apart(points: list[FrontierPoint]) -> None:
    """Keep on the frontier's cohort only the points that share its task set and
    COMPARED settings; the others get the reason they are shown apart."""
    scored = [p for p in points if p.value is not None and not p.apart]
    cohorts: dict[tuple[Any, ...], list[FrontierPoint]] = defaultdict(list)
    for p in scored:
        cohorts[_facts(p)].append(p)
    if not cohorts:
        return
    ref_facts, members = max(
        cohorts.items(), key=lambda kv: (len(kv[0][0]), len(kv[1]), sum(p.simulations for p in kv[1]))
    )
    ref = members[0]
    for p in points:
        if p.apart or _facts(p) == ref_facts:
            continue
        reasons = []
        if p.task_set != ref.task_set:
            size, ref_size = len(p.task_set), len(ref.task_set)
            reasons.append(
                f"{size} task(s), not the frontier's {ref_size}" if size != ref_size else f"another set of {size} tasks"
            )
        for name in COMPARED.values():
            if p.settings.get(name) != ref.settings.get(name):
                reasons.append(f"{name} {_shown(p.settings.get(name), name)}, not {_shown(ref.settings.get(name), name)}")
        p.apart = "; ".join(reasons)


def _mark_frontier(points: list[FrontierPoint]) -> None:
    priced = [p for p in points if p.cost_per_simulation_nanousd is not None and p.value is not None and not p.apart]
    for p in priced:
        p.on_frontier = not any(
            q is not p
            and q.cost_per_simulation_nanousd <= p.cost_per_simulation_nanousd  # type: ignore[operator]
            and q.value >= p.value  # type: ignore[operator]
            and (q.cost_per_simulation_nanousd < p.cost_per_simulation_nanousd or q.value > p.value)  # type: ignore[operator]
            for q in priced
        )


def as_json(f: Frontier) -> dict[str, Any]:
    """The figures `/api/frontier` returns and `manage.py frontier --json` prints."""
    return {
        "benchmark": f.benchmark,
        "k": f.k,
        "by": f.by,
        "total": f.total,
        "shown": len(f.points),
        "limit": f.limit,
        "interval": f"95 % normal interval over tasks, at least Wilson's below {SMALL_TASKS} tasks",
        "cohort": f.cohort,
        "points": [
            {
                "key": p.key,
                "label": p.label,
                "target": p.target,
                "arm": p.arm,
                "group": p.group,
                "run_ids": p.run_ids,
                "simulations": p.simulations,
                "tasks": p.tasks,
                "cost_usd": None if p.cost_nanousd is None else money.plain(p.cost_nanousd),
                "cost_per_simulation_usd": None if p.cost_per_simulation_nanousd is None
                else money.plain(p.cost_per_simulation_nanousd),
                "cost_basis": p.cost_basis,
                "pass_hat_k": p.value,
                "interval": None if p.lo is None else [p.lo, p.hi],
                "on_frontier": p.on_frontier,
                "apart": p.apart,
                "settings": p.settings,
            }
            for p in f.points
        ],
        "frontier": [p.key for p in f.frontier],
        "neighbours": neighbours_json(f),  # is each frontier point told apart from the next dearer one?
    }


@dataclass(frozen=True)
class Neighbours:
    """Two points next to each other on the frontier (by cost) and whether their pass^k differ
    by more than noise (ledger.benchmarks.power.distinguish; docs/comparisons.md)."""

    cheaper: str  # point keys
    dearer: str
    diff: float  # dearer's pass^k − cheaper's
    distinguishable: bool
    smallest_detectable: float


def neighbours(f: Frontier) -> list[Neighbours]:
    out = []
    on = [p for p in f.frontier if p.value is not None and p.lo is not None and p.hi is not None]
    for cheaper, dearer in zip(on, on[1:]):
        told = distinguish((cheaper.value, cheaper.lo, cheaper.hi), (dearer.value, dearer.lo, dearer.hi))  # type: ignore[arg-type]
        out.append(Neighbours(cheaper.key, dearer.key, told.diff, told.distinguishable, told.smallest_detectable))
    return out


def neighbours_json(f: Frontier) -> list[dict[str, Any]]:
    return [
        {"cheaper": n.cheaper, "dearer": n.dearer, "diff": n.diff, "distinguishable": n.distinguishable,
         "smallest_detectable": n.smallest_detectable}
        for n in neighbours(f)
    ]  # fmt: skip
