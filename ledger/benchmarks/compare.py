"""Compare two benchmark runs, or two groups of runs, on the items they share.

`compare_runs` / `compare_groups` return a `Comparison`: figures only. Its
consumers lay it out: ledger.benchmarks.compare_text as the lines `manage.py
compare` prints, ledger.reports.compare_json as `--json` and GET /api/compare
return it. The statistics live in ledger.benchmarks.stats and τ²'s pass^k in
ledger.benchmarks.metrics; this module only picks the items, pairs them and
reports what might make the comparison unfair.
docs/comparisons.md says what every figure means.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NamedTuple

from kernel import money
from ledger.benchmarks import power, stats
from ledger.benchmarks.decisions import patterns as decision_patterns
from ledger.benchmarks.metrics import is_successful, summarize
from ledger.models import BenchmarkItem, BenchmarkRun


class CompareError(Exception):
    """A comparison that cannot be made (unknown run, empty group, nothing shared)."""


class AcrossBenchmarks(CompareError):
    """Runs of different benchmarks or domains: their items coincide only by task
    id (airline task 7 is not retail task 7). Refused unless asked for
    (`across_benchmarks=True`, `compare --across-benchmarks`)."""


class SameSides(CompareError):
    """A run or group compared with itself. One rule for the command (exit 2),
    GET /api/compare (400, param `b`) and the compare page (400): refused, as
    there is nothing to compare."""

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f"A and B are the same {kind} ({name}): pick two different {kind}s")


@dataclass
class Side:
    run_ids: list[int]
    label: str  # the run's label (else its target), or the group's name
    items: int  # shared items used on this side (item ids x runs for a group)
    mean_reward: float | None
    pass_hat_k: list[float]  # on the shared tasks, k = 1..max_k
    pass1_ci: tuple[float, float]  # Wilson 95 % for successes / items
    cost_per_item_usd: Decimal | None  # None: unknown (every call unpriced, or no cost recorded)
    unpriced_calls: int = 0  # calls behind the cost nobody priced: then the cost is a lower bound


@dataclass
class TaskDiff:
    task_id: str
    a_successes: int
    a_trials: int
    b_successes: int
    b_trials: int

    @property
    def diff(self) -> float:
        """B's success rate on this task minus A's."""
        return self.b_successes / self.b_trials - self.a_successes / self.a_trials


SIGN = "B - A"  # every difference compare reports: B's figure minus A's


@dataclass
class Replicates:
    """What two groups of replicate runs add (reference §5.4). Differences are B − A."""

    a_runs: int
    b_runs: int
    a_pass1: list[float]  # pass^1 of each run on the shared items
    b_pass1: list[float]
    a_sd: float | None  # between-run sample SD of pass^1; None with one run
    b_sd: float | None
    a_agree: float  # share of shared tasks on which every run of the side has the same successes
    b_agree: float
    diff: float  # pooled pass^1, B − A
    bootstrap_p: float  # from the two-stage bootstrap's draws
    mcnemar_min: float  # exact McNemar p over every matched (A run, B run) pair (same seed)
    mcnemar_max: float
    pairs: int


@dataclass
class DecisionRow:
    """One side's shared items on whose linked calls one formation decided the
    same (e.g. `verify: revised`), and how they scored."""

    side: str  # A or B
    # `<formation>: <label>[+<label>]` (ledger.benchmarks.decisions.pattern), `<formation>: none`
    # (no decision of that formation, or no linked trace), or `none` on a side without formations
    decision: str
    items: int
    successes: int
    other_successes: int | None  # two runs: the other side's successes on the same items

    @property
    def rate(self) -> float:
        return self.successes / self.items

    @property
    def diff(self) -> float | None:
        """B − A on these items (two runs only)."""
        if self.other_successes is None:
            return None
        other = self.other_successes / self.items
        return self.rate - other if self.side == "B" else other - self.rate


@dataclass
class Comparison:
    a: Side
    b: Side
    shared_items: int  # item ids every compared run has evaluated
    shared_tasks: int
    warnings: list[str]
    a_only: int  # discordant pairs: correct only in A
    b_only: int  # correct only in B
    mcnemar_p: float
    diff_pass1: float  # B - A
    diff_ci: tuple[float, float]  # bootstrap 95 %
    bootstrap: str
    tasks: list[TaskDiff]
    replicates: Replicates | None = None  # groups only
    decisions: list[DecisionRow] = field(default_factory=list)  # empty when no formation decided anything
    # The smallest B − A these runs detect at 80 % power and α 0.05 (2.80 × the bootstrap draws'
    # SD; None when fewer than two tasks or no spread), and what the interval says in words.
    smallest_detectable: float | None = None
    verdict: str = ""


class _Outcome(NamedTuple):
    """One evaluated item; shaped for ledger.benchmarks.metrics.summarize. A tuple, not a
    dataclass: a 10-run group compare makes 8,000 of them and reads `success` ~150,000 times."""

    item_id: str
    task_id: str
    reward: float
    success: bool  # is_successful(reward), τ²'s test
    infra_error: bool = False
    seed: int | None = None  # τ²'s trial seed


@dataclass
class _RunData:
    run: BenchmarkRun
    evaluated: dict[str, _Outcome]  # by item id; infrastructure errors left out
    infra_errors: int
    decisions: dict[str, dict[str, str]] = field(default_factory=dict)  # item id -> formation -> pattern


# -- public entry points -------------------------------------------------------


def compare_runs(
    a: BenchmarkRun | int, b: BenchmarkRun | int, *, seed: int = 0, resamples: int = 2000, across_benchmarks: bool = False
) -> Comparison:
    """Compare run B against run A on the items both evaluated, pairing items
    by item id; the interval is a task-clustered paired bootstrap."""
    run_a, run_b = _get_run(a), _get_run(b)
    if run_a.pk == run_b.pk:
        raise SameSides("run", f"#{run_a.pk}")
    for run in (run_a, run_b):
        if run.is_invalid:
            raise CompareError(f"run #{run.pk} is marked invalid ({run.invalid_reason}); --revalidate it to compare it")
    return _compare(
        *[[data] for data in _load([run_a, run_b])],
        label_a=run_a.label or run_a.target,
        label_b=run_b.label or run_b.target,
        grouped=False,
        seed=seed,
        resamples=resamples,
        across_benchmarks=across_benchmarks,
    )


def compare_groups(
    a: str, b: str, *, seed: int = 0, resamples: int = 2000, across_benchmarks: bool = False
) -> Comparison:
    """Compare group B against group A (`BenchmarkRun.group`), pooling each
    group's runs on the item ids every run of both groups evaluated; the
    interval is a two-stage bootstrap (runs within each side, then tasks)."""
    if a == b:
        raise SameSides("group", repr(a))
    return compare_run_sets(
        _group_runs(a), _group_runs(b), label_a=a, label_b=b, seed=seed, resamples=resamples,
        across_benchmarks=across_benchmarks,
    )  # fmt: skip


def compare_run_sets(
    runs_a: Sequence[BenchmarkRun], runs_b: Sequence[BenchmarkRun], *, label_a: str, label_b: str,
    seed: int = 0, resamples: int = 2000, across_benchmarks: bool = False,
) -> Comparison:  # fmt: skip
    """compare_groups on given runs (e.g. one experiment's replicates of two
    arms, whose groups also hold other experiments' runs). Invalid runs are left
    out with a note."""
    left_out = [
        f"run #{r.pk} of group {name!r} left out: marked invalid ({r.invalid_reason})"
        for name, runs in ((label_a, runs_a), (label_b, runs_b))
        for r in runs
        if r.is_invalid
    ]
    for name, runs in ((label_a, runs_a), (label_b, runs_b)):
        if not runs:
            raise CompareError(f"no runs in group {name!r}")
        if all(r.is_invalid for r in runs):
            raise CompareError(f"no valid run in group {name!r}: " + "; ".join(left_out))
    valid_a, valid_b = [r for r in runs_a if not r.is_invalid], [r for r in runs_b if not r.is_invalid]
    loaded = _load([*valid_a, *valid_b])
    return _compare(
        loaded[: len(valid_a)],
        loaded[len(valid_a) :],
        label_a=label_a,
        label_b=label_b,
        grouped=True,
        seed=seed,
        resamples=resamples,
        notes=left_out,
        across_benchmarks=across_benchmarks,
    )


# -- loading -------------------------------------------------------------------


def _get_run(ref: BenchmarkRun | int) -> BenchmarkRun:
    if isinstance(ref, BenchmarkRun):
        return ref
    try:
        return BenchmarkRun.objects.get(pk=ref)
    except (BenchmarkRun.DoesNotExist, ValueError, TypeError):
        raise CompareError(f"unknown run id {ref}") from None


def _group_runs(name: str) -> list[BenchmarkRun]:
    runs = list(BenchmarkRun.objects.filter(group=name).order_by("pk")) if name else []
    if not runs:
        raise CompareError(f"no runs in group {name!r}")
    return runs


def _load(runs: Sequence[BenchmarkRun]) -> list[_RunData]:
    """The runs' items, in one query (a 10-run group compare loads 20 runs), and what the
    formations decided on the items where they decided anything, in another (most items have
    no decision: their JSON is not read)."""
    loaded = {run.pk: _RunData(run=run, evaluated={}, infra_errors=0) for run in runs}
    items = BenchmarkItem.objects.filter(run__in=list(loaded))
    for run_id, item_id, task_id, reward, infra_error, trial_seed in items.values_list(
        "run_id", "item_id", "task_id", "reward", "infra_error", "seed"
    ):
        data = loaded[run_id]
        if infra_error:
            data.infra_errors += 1  # not evaluated: never a score, on either side
            continue
        # A missing reward on an evaluated item counts as 0, as τ² does.
        reward = reward if reward is not None else 0.0
        data.evaluated[item_id] = _Outcome(item_id, task_id, reward, is_successful(reward), seed=trial_seed)
    for run_id, item_id, decided in items.exclude(decisions={}).values_list("run_id", "item_id", "decisions"):
        if decided:
            loaded[run_id].decisions[item_id] = decision_patterns(decided)
    return [loaded[run.pk] for run in runs]


def _decision_rows(side_a: list[_RunData], side_b: list[_RunData], shared: set[str], grouped: bool) -> list[DecisionRow]:
    """Shared items by what each formation decided on them, per side (a side's
    items once per formation it ran, `none` where that formation decided
    nothing); paired with the other side for two runs."""
    if not any(d.decisions for d in side_a + side_b):
        return []
    rows: list[DecisionRow] = []
    for name, side, other in (("A", side_a, side_b), ("B", side_b, side_a)):
        formations = sorted({f for data in side for item_id in shared for f in data.decisions.get(item_id, {})})
        for formation in formations or [""]:
            cells: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
            for data in side:
                for item_id in shared:
                    default = f"{formation}: none" if formation else "none"
                    cell = cells[data.decisions.get(item_id, {}).get(formation, default)]
                    cell[0] += 1
                    cell[1] += data.evaluated[item_id].success
                    if not grouped:
                        cell[2] += other[0].evaluated[item_id].success
            for decision in sorted(cells, key=lambda d: (d.endswith("none"), d)):
                n, ok, other_ok = cells[decision]
                rows.append(DecisionRow(name, decision, n, ok, None if grouped else other_ok))
    return rows


# -- the comparison ------------------------------------------------------------


def _compare(
    side_a: list[_RunData],
    side_b: list[_RunData],
    *,
    label_a: str,
    label_b: str,
    grouped: bool,
    seed: int,
    resamples: int,
    notes: Sequence[str] = (),
    across_benchmarks: bool = False,
) -> Comparison:
    if not 1 <= resamples <= stats.MAX_RESAMPLES:
        raise CompareError(f"--resamples must be between 1 and {stats.MAX_RESAMPLES:,} (default 2000), not {resamples}")
    if not across_benchmarks:
        _one_benchmark(side_a, side_b, label_a=label_a, label_b=label_b, grouped=grouped)
    everyone = side_a + side_b
    shared = set(everyone[0].evaluated)
    for data in everyone[1:]:
        shared &= data.evaluated.keys()
    if not shared:
        raise CompareError(
            f"{_describe(side_a, label_a, grouped)} and {_describe(side_b, label_b, grouped)} "
            "share no evaluated items: nothing to compare"
        )

    # Shared item ids by task; every run has the same items of a shared task.
    by_task: dict[str, list[str]] = defaultdict(list)
    for item_id in shared:
        by_task[everyone[0].evaluated[item_id].task_id].append(item_id)
    task_ids = sorted(by_task, key=_natural)

    a = _side(side_a, shared, label_a)
    b = _side(side_b, shared, label_b)
    tasks = [_task_diff(t, by_task[t], side_a, side_b) for t in task_ids]

    warnings = [*notes, *_warnings(side_a, side_b, shared, grouped, label_a, label_b)]
    pairs, unmatched = _matched_runs(side_a, side_b) if grouped else ([(side_a[0], side_b[0])], [])
    if unmatched:
        warnings.append(
            "McNemar pairs runs by seed, then in id order; unmatched run(s) "
            + ", ".join(f"#{d.run.pk}" for d in unmatched)
            + " left out of the discordant counts"
        )
    a_only = b_only = 0
    by_trial_number = []
    for run_a, run_b in pairs:
        one_a, one_b, unpaired = _discordant(run_a, run_b, shared)
        a_only, b_only = a_only + one_a, b_only + one_b
        if unpaired:
            by_trial_number.append(f"#{run_a.run.pk} and #{run_b.run.pk}")
    if by_trial_number:
        warnings.append(
            "no trial seed in common between run(s) " + "; ".join(by_trial_number)
            + ": their items are paired by trial number, not by (task, trial seed)"
        )

    if grouped:

        def per_run(data: _RunData) -> list[tuple[int, int]]:
            return [(sum(data.evaluated[i].success for i in by_task[t]), len(by_task[t])) for t in task_ids]

        counts_a, counts_b = [per_run(d) for d in side_a], [per_run(d) for d in side_b]
        draws = stats.two_stage_bootstrap(counts_a, counts_b, resamples=resamples, seed=seed)
        method = f"two-stage (runs within each side, then tasks), {resamples} resamples, seed {seed}"
        replicates = _replicates(side_a, side_b, shared, counts_a, counts_b, b.pass_hat_k[0] - a.pass_hat_k[0], draws, pairs)
    else:
        draws = stats.task_bootstrap(
            [(td.a_trials, td.a_successes, td.b_successes) for td in tasks], resamples=resamples, seed=seed
        )
        method = f"task-clustered paired, {resamples} resamples, seed {seed}"
        replicates = None

    diff_ci = stats.percentile_interval(draws, level=0.95)
    said = power.verdict(diff_ci, stats.sample_sd(draws), len(task_ids))
    return Comparison(
        a=a,
        b=b,
        shared_items=len(shared),
        shared_tasks=len(task_ids),
        warnings=warnings,
        a_only=a_only,
        b_only=b_only,
        mcnemar_p=stats.mcnemar_exact_p(a_only, b_only),
        diff_pass1=b.pass_hat_k[0] - a.pass_hat_k[0],
        diff_ci=diff_ci,
        bootstrap=method,
        tasks=tasks,
        replicates=replicates,
        decisions=_decision_rows(side_a, side_b, shared, grouped),
        smallest_detectable=said.smallest_detectable,
        verdict=said.text,
    )


def _replicates(
    side_a: list[_RunData], side_b: list[_RunData], shared: set[str], counts_a: list[list[tuple[int, int]]],
    counts_b: list[list[tuple[int, int]]], diff: float, draws: list[float],
    pairs: list[tuple[_RunData, _RunData]],
) -> Replicates:  # fmt: skip
    """Replicate statistics: per-run pass^1 and its spread, agreement across
    runs per task, the bootstrap p and the McNemar p of every matched run pair
    (same seed, items paired by (task, trial seed): a paired test needs paired
    trials; runs of different seeds are not)."""

    def pass1(data: _RunData) -> float:
        return summarize([data.evaluated[i] for i in shared]).pass_hat_k[0]

    def agree(counts: list[list[tuple[int, int]]]) -> float:
        tasks = len(counts[0])
        return sum(1 for t in range(tasks) if len({run[t][0] for run in counts}) == 1) / tasks

    p_values = []
    for run_a, run_b in pairs:
        a_only, b_only, _ = _discordant(run_a, run_b, shared)
        p_values.append(stats.mcnemar_exact_p(a_only, b_only))
    a_pass1, b_pass1 = [pass1(d) for d in side_a], [pass1(d) for d in side_b]
    return Replicates(
        a_runs=len(side_a), b_runs=len(side_b), a_pass1=a_pass1, b_pass1=b_pass1,
        a_sd=stats.sample_sd(a_pass1), b_sd=stats.sample_sd(b_pass1),
        a_agree=agree(counts_a), b_agree=agree(counts_b), diff=diff, bootstrap_p=stats.bootstrap_p(draws),
        mcnemar_min=min(p_values), mcnemar_max=max(p_values), pairs=len(p_values),
    )  # fmt: skip


def _side(runs: list[_RunData], shared: set[str], label: str) -> Side:
    outcomes = [data.evaluated[i] for data in runs for i in shared]
    summary = summarize(outcomes)
    successes = sum(o.success for o in outcomes)
    return Side(
        run_ids=[data.run.pk for data in runs],
        label=label,
        items=len(outcomes),
        mean_reward=summary.mean_reward,
        pass_hat_k=summary.pass_hat_k,
        pass1_ci=stats.wilson_interval(successes, len(outcomes)),
        cost_per_item_usd=_cost_per_item([data.run for data in runs]),
        unpriced_calls=sum(data.run.unpriced_calls for data in runs),
    )


def _cost_per_item(runs: list[BenchmarkRun]) -> Decimal | None:
    """The runs' recorded cost over all their evaluated items (not only the
    shared ones: cost is recorded per run). Unpriced if any run is."""
    costs = [r.cost_nanousd for r in runs if r.cost_nanousd is not None]
    if len(costs) < len(runs):
        return None
    evaluated = sum(r.evaluated for r in runs)
    if evaluated <= 0:
        return None
    return money.to_usd(sum(costs)) / evaluated


def _task_diff(task_id: str, item_ids: list[str], side_a: list[_RunData], side_b: list[_RunData]) -> TaskDiff:
    def count(side: list[_RunData]) -> int:
        return sum(data.evaluated[i].success for data in side for i in item_ids)

    return TaskDiff(
        task_id=task_id,
        a_successes=count(side_a),
        a_trials=len(item_ids) * len(side_a),
        b_successes=count(side_b),
        b_trials=len(item_ids) * len(side_b),
    )


def _discordant(run_a: _RunData, run_b: _RunData, shared: set[str]) -> tuple[int, int, bool]:
    """(correct only in A, correct only in B, unpaired seeds) over the shared
    items of two runs, each A trial paired with the B trial of the same task and
    trial seed (τ² derives a trial's seed from the run's); by trial number when
    the two runs have no (task, trial seed) in common: seeds unrecorded, or
    recorded and all different (the third value: said in a warning)."""
    keyed_a = {(o.task_id, o.seed): o for o in (run_a.evaluated[i] for i in shared) if o.seed is not None}
    keyed_b = {(o.task_id, o.seed): o for o in (run_b.evaluated[i] for i in shared) if o.seed is not None}
    common = keyed_a.keys() & keyed_b.keys()
    if common:
        pairs = [(keyed_a[k], keyed_b[k]) for k in common]
    else:
        pairs = [(run_a.evaluated[i], run_b.evaluated[i]) for i in shared]
    a_only = sum(1 for x, y in pairs if x.success and not y.success)
    b_only = sum(1 for x, y in pairs if y.success and not x.success)
    return a_only, b_only, bool(keyed_a and keyed_b and not common)


def _matched_runs(
    side_a: list[_RunData], side_b: list[_RunData]
) -> tuple[list[tuple[_RunData, _RunData]], list[_RunData]]:
    """Pairs A-runs with B-runs for McNemar: equal seeds first (τ² derives its
    trial seeds from the run seed), then the rest in id order. Returns the
    pairs and the runs left without a partner."""
    free_b = list(side_b)
    pairs: list[tuple[_RunData, _RunData]] = []
    left_a: list[_RunData] = []
    for data in side_a:
        partner = next((d for d in free_b if d.run.seed is not None and d.run.seed == data.run.seed), None)
        if partner is None:
            left_a.append(data)
        else:
            free_b.remove(partner)
            pairs.append((data, partner))
    for data_a, data_b in zip(left_a, free_b):
        pairs.append((data_a, data_b))
    n = len(pairs) - (len(side_a) - len(left_a))
    return pairs, left_a[n:] + free_b[n:]


# -- warnings ------------------------------------------------------------------

# llm_args keys that say where and how patiently to call the user simulator,
# not which simulator it is (the port differs between runs).
_TRANSPORT_ARGS = {
    "api_base",
    "base_url",
    "api_version",
    "num_retries",
    "max_retries",
    "retry_policy",
    "timeout",
    "extra_headers",
}


def _user_args(run: BenchmarkRun) -> str:
    args = run.user_args if isinstance(run.user_args, dict) else {}
    kept = {k: v for k, v in sorted(args.items()) if k not in _TRANSPORT_ARGS}
    return ", ".join(f"{k}={v!r}" for k, v in kept.items()) or "none"


_CHECKED: list[tuple[str, Callable[[BenchmarkRun], Any]]] = [
    ("benchmark", lambda r: r.benchmark),
    ("seed", lambda r: r.seed),
    ("task split", lambda r: r.task_split or "unrecorded"),
    ("retrieval config", lambda r: r.retrieval_config or "unrecorded"),
    ("user simulator", lambda r: r.user_model or "unrecorded"),
    ("user simulator args", _user_args),
    ("τ² version", lambda r: r.tau2_version or "unrecorded"),
    ("τ² commit", lambda r: r.tau2_commit or "unrecorded"),
    ("cost source", lambda r: r.cost_source),
]


# Settings that change the task itself, not only the run: runs that differ in one measure
# different things, so the warning says "not comparable" rather than only "differ".
_NOT_COMPARABLE = {
    "retrieval config": "how banking_knowledge's agent searches its knowledge base",
}


def _warnings(
    side_a: list[_RunData], side_b: list[_RunData], shared: set[str], grouped: bool, label_a: str, label_b: str
) -> list[str]:
    out: list[str] = []
    for name, get in _CHECKED:
        if name in _NOT_COMPARABLE and len(set(_distinct(get(d.run) for d in side_a + side_b))) > 1:
            out.append(
                f"not comparable: runs differ in {name} ({_NOT_COMPARABLE[name]}): "
                f"A {_by_run(side_a, get)}; B {_by_run(side_b, get)}"
            )
            continue
        va = _distinct(get(d.run) for d in side_a)
        vb = _distinct(get(d.run) for d in side_b)
        # Replicates in a group differ in seed by design: for seeds only the
        # two sides' sets must agree; anything else must be one value throughout.
        differs = set(va) != set(vb) if name == "seed" else len(set(va) | set(vb)) > 1
        if differs and name != "seed" and (len(va) > 1 or len(vb) > 1):
            # A side mixes values: say which run has which (the sets alone, "A x; y, B x; y",
            # named nothing that differs).
            out.append(f"runs differ in {name}: A {_by_run(side_a, get)}; B {_by_run(side_b, get)}")
        elif differs:
            out.append(f"runs differ in {name}: A {'; '.join(va)}, B {'; '.join(vb)}")

    left_a = sum(len(d.evaluated) - len(shared) for d in side_a)
    left_b = sum(len(d.evaluated) - len(shared) for d in side_b)
    if left_a or left_b:
        out.append(
            f"item sets differ: compared on {len(shared)} shared item(s); "
            f"left out {left_a} evaluated A item(s) and {left_b} evaluated B item(s)"
        )
    for side, data_list in (("A", side_a), ("B", side_b)):
        for data in data_list:
            if data.infra_errors:
                out.append(
                    f"{side} run #{data.run.pk} has {data.infra_errors} infrastructure error(s): "
                    "excluded, not scored; fix the cause and re-run before trusting this comparison"
                )
            if data.run.status != "complete":
                out.append(f"{side} run #{data.run.pk} has status {data.run.status!r}")

    ids_a = {d.run.pk for d in side_a}
    both = sorted(ids_a & {d.run.pk for d in side_b})
    if both:
        out.append("run(s) " + ", ".join(f"#{i}" for i in both) + " are on both sides")
    if grouped:
        for side, data_list, label in (("A", side_a, label_a), ("B", side_b, label_b)):
            if len(data_list) == 1:
                out.append(
                    f"group {label!r} ({side}) has a single run: the interval cannot show run-to-run variation"
                )
    return out


def _by_run(side: list[_RunData], get: Callable[[BenchmarkRun], Any]) -> str:
    """`x (#1, #3), y (#2)`: each value with the runs of the side that have it."""
    runs: dict[str, list[str]] = {}
    for data in side:
        runs.setdefault(_distinct([get(data.run)])[0], []).append(f"#{data.run.pk}")
    return ", ".join(f"{value} ({', '.join(ids)})" for value, ids in runs.items())


def _distinct(values: Iterable[Any]) -> list[str]:
    seen: dict[str, None] = {}
    for value in values:
        seen.setdefault("unrecorded" if value is None or value == "" else str(value), None)
    return list(seen)


def _benchmark_of(run: BenchmarkRun) -> str:
    """`tau2-airline`, with the domain when the benchmark's name does not end in it."""
    return run.benchmark if run.benchmark.endswith(run.domain) else f"{run.benchmark} ({run.domain})"


def _one_benchmark(side_a: list[_RunData], side_b: list[_RunData], *, label_a: str, label_b: str, grouped: bool) -> None:
    """AcrossBenchmarks, naming both sides, unless every run is of one benchmark and domain."""
    kinds_a = _distinct(_benchmark_of(d.run) for d in side_a)
    kinds_b = _distinct(_benchmark_of(d.run) for d in side_b)
    if len(set(kinds_a) | set(kinds_b)) > 1:
        raise AcrossBenchmarks(
            f"{_describe(side_a, label_a, grouped)} is {' + '.join(kinds_a)} and {_describe(side_b, label_b, grouped)} "
            f"is {' + '.join(kinds_b)}: runs of different benchmarks or domains share items only by task id, so they are "
            "not compared (give --across-benchmarks to compare them anyway)"
        )


def _describe(side: list[_RunData], label: str, grouped: bool) -> str:
    if grouped:
        return f"group {label!r}"
    return f"run #{side[0].run.pk}"


def _natural(task_id: str) -> tuple[int, int, str]:
    # τ² task ids are often integers; "7" before "11".
    return (0, int(task_id), "") if task_id.isdigit() else (1, 0, task_id)
