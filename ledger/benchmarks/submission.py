"""Is a set of τ² runs a leaderboard submission? The checks `tau2_submission`
makes before anything is written, what Marina fills in that τ² cannot (the
cost per domain from its own spend, the submission type, methodology notes
for a custom arm) and what the board will show of an incomplete set.

The rules are those of τ²'s submission guide (sierra-research/tau2-bench
docs/leaderboard-submission.md): every text domain, or one (ranked per
domain); one result per domain; all tasks (no --task-ids / --num-tasks);
at least 4 trials; the base split; the same agent and user simulator with
identical args across domains; `submission_type: "custom"` with methodology
notes for anything that adds control flow (Marina's formations and crews);
and, Marina's own, no credential left in a file and no infrastructure error.

Each check is a `Line` (PASS / WARN / FAIL and the reason). Nothing here
calls τ²: repro/submission.py does that."""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import ijson
from django.db.models import Count, Q, Sum

from kernel import formations, money
from kernel.redact import REDACTED, SECRET_VALUES, is_secret_key
from ledger.benchmarks import callers
from ledger.benchmarks.board import BASE_SPLIT_TASKS, MIN_TRIALS, RETRIEVAL_DOMAINS, reasoning_effort
from ledger.models import BenchmarkItemTrace, BenchmarkRun, Span, Trace

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"
TEXT_DOMAINS = ("banking_knowledge", "retail", "airline", "telecom")
STANDARD, CUSTOM = "standard", "custom"
# What a person fills in before the pull request: marked so it cannot pass for data.
FILL_IN = "FILL IN"

# Marina's formations (kernel/formations.py: prefix, name, what each adds to the
# agent's turn, whether it makes the submission custom). A stack is peeled prefix by prefix.
CREW_PREFIX = formations.CREW_PREFIX
# Opt-in headers that turn a formation on for a plain model id.
_OPT_IN_HEADERS = {entry.header: entry for entry in formations.ALL if entry.header}
_OFF = {"", "off", "0", "false", "no"}


class SubmissionError(ValueError):
    """The runs cannot be chosen (no such run, an empty group): the message says which."""


@dataclass(frozen=True)
class Line:
    status: str  # PASS | WARN | FAIL
    requirement: str
    reason: str

    def text(self) -> str:
        return f"{self.status:<4} {self.requirement}: {self.reason}"


@dataclass(frozen=True)
class Arm:
    """What the agent of a run is, for the board: standard, or custom and why."""

    submission_type: str
    base_model: str  # the model under the formations
    layers: tuple[str, ...] = ()  # formation names, outermost first; `crew <name>` for a crew
    steps: tuple[str, ...] = ()  # what each layer adds, as a sentence
    modified_prompts: bool | None = False  # False standard, True lessons, None unknown (a crew)

    @property
    def custom(self) -> bool:
        return self.submission_type == CUSTOM


def select_runs(run_ids: Sequence[int] = (), group: str | None = None) -> list[BenchmarkRun]:
    """The runs by id (in the order given) or every run of a group (by domain)."""
    if bool(run_ids) == bool(group):
        raise SubmissionError("name the runs: their ids, or --group GROUP (not both)")
    if group:
        runs = list(BenchmarkRun.objects.filter(group=group).order_by("domain", "pk"))
        if not runs:
            raise SubmissionError(f"group {group!r} has no runs")
        return runs
    found = BenchmarkRun.objects.in_bulk(list(run_ids))
    missing = [str(i) for i in run_ids if i not in found]
    if missing:
        raise SubmissionError(f"no run #{', #'.join(missing)} in the ledger")
    return [found[i] for i in dict.fromkeys(run_ids)]


def arm_of(run: BenchmarkRun) -> Arm:
    """Standard for a model as it is; custom for a formation, a stack, a crew or an opt-in header."""
    model = run.agent_model or run.target
    layers: list[str] = []
    steps: list[str] = []
    modified: bool | None = False
    peeled = True
    while peeled:
        peeled = False
        for entry in formations.ALL:
            if model.startswith(entry.prefix):
                model = model[len(entry.prefix) :]
                layers.append(entry.name)
                steps.append(f"{entry.prefix} {entry.description}")
                peeled = True
    if formations.VERIFY.name in layers and "+" in model:
        model = model.rsplit("+", 1)[0]  # verify's checker after the last +
    if run.target_kind == "crew" or model.startswith(CREW_PREFIX):
        layers.append(f"crew {model[len(CREW_PREFIX):] if model.startswith(CREW_PREFIX) else run.target}")
        steps.append(
            "a Marina crew: a named model id with optional extra system text and a default reasoning effort "
            "(its definition is in Marina's admin, Crews)"
        )
        modified = None
    headers = run.agent_args.get("extra_headers") if isinstance(run.agent_args, dict) else None
    for header, entry in _OPT_IN_HEADERS.items():
        value = headers.get(header) if isinstance(headers, dict) else None
        if isinstance(value, str) and value.strip().lower() not in _OFF and not value.startswith("observe"):
            if entry.name not in layers:
                layers.append(entry.name)
                steps.append(f"{header}: {value} ({entry.description})")
    used = [formations.BY_NAME[name] for name in layers if name in formations.BY_NAME]
    if any(entry.changes_prompt for entry in used):
        modified = True  # lessons add text to the agent's prompt
    if modified is False and any(entry.changes_prompt is None for entry in used):
        modified = None  # verify: the proposer's prompt is the benchmark's; the checker's is Marina's
    custom = len(layers) > len(used) or any(entry.custom for entry in used)  # a crew is always custom
    return Arm(CUSTOM if custom else STANDARD, model, tuple(layers), tuple(steps), modified if layers else False)


# -- the checks ------------------------------------------------------------------------------


@dataclass
class RunFacts:
    """What the checks read of one run (one query each)."""

    run: BenchmarkRun
    tasks: int  # distinct tasks with a simulation
    short_tasks: int  # tasks with fewer simulations than num_trials

    @classmethod
    def of(cls, run: BenchmarkRun) -> RunFacts:
        per_task = Counter(run.items.values_list("task_id", flat=True))
        return cls(run, len(per_task), sum(1 for n in per_task.values() if n < run.num_trials))


def _names(runs: Iterable[BenchmarkRun]) -> str:
    return ", ".join(f"#{r.pk} ({r.domain})" for r in runs)


def check(
    runs: Sequence[BenchmarkRun], *, keys_left: dict[int, list[str]] | None = None, submission_type: str = "auto",
) -> list[Line]:  # fmt: skip
    """One line per requirement. `keys_left`: per run id, where a credential is still in
    its scrubbed results file (empty: none); None when no file was given."""
    facts = [RunFacts.of(r) for r in runs]
    lines = [
        _domains(runs),
        _one_per_domain(runs),
        _all_tasks(facts),
        _trials(runs),
        _split(runs),
        _same_participants(runs),
        _submission_type(runs, submission_type),
        _keys(runs, keys_left),
        _clean(runs),
    ]
    if any(r.domain in RETRIEVAL_DOMAINS for r in runs):
        lines.append(_retrieval(runs))
    lines.append(_costs(runs))
    return lines


def _retrieval(runs: Sequence[BenchmarkRun]) -> Line:
    """The board's banking results must carry their retrieval config (τ²'s Results refuses one without)."""
    req = "retrieval config"
    banking = [r for r in runs if r.domain in RETRIEVAL_DOMAINS]
    missing = [f"run #{r.pk} ({r.domain})" for r in banking if not r.retrieval_config]
    if missing:
        return Line(FAIL, req, f"{', '.join(missing)} recorded none (a results file of sierra's τ² has info.retrieval_config)")
    return Line(PASS, req, "; ".join(f"{r.domain}: {r.retrieval_config}" for r in banking))


def _domains(runs: Sequence[BenchmarkRun]) -> Line:
    req = "text domains"
    other = sorted({r.domain for r in runs} - set(TEXT_DOMAINS))
    if other:
        return Line(FAIL, req, f"{', '.join(other)} is not a leaderboard text domain ({', '.join(TEXT_DOMAINS)})")
    have = [d for d in TEXT_DOMAINS if any(r.domain == d for r in runs)]
    missing = [d for d in TEXT_DOMAINS if d not in have]
    if missing:
        return Line(
            WARN, req,
            f"{', '.join(have)} only; the board ranks each domain on its own, and shows no result for "
            f"{', '.join(missing)} (all four are recommended)",
        )  # fmt: skip
    return Line(PASS, req, "all four: " + ", ".join(have))


def _one_per_domain(runs: Sequence[BenchmarkRun]) -> Line:
    req = "one result per domain"
    by_domain = Counter(r.domain for r in runs)
    repeated = [d for d, n in by_domain.items() if n > 1]
    if repeated:
        detail = "; ".join(f"{d}: {_names(r for r in runs if r.domain == d)}" for d in repeated)
        return Line(FAIL, req, f"more than one run for {detail}: choose one per domain")
    return Line(PASS, req, "; ".join(f"{r.domain} run #{r.pk}" for r in runs))


def _all_tasks(facts: Sequence[RunFacts]) -> Line:
    req = "all tasks"
    problems = []
    for f in facts:
        base = BASE_SPLIT_TASKS.get(f.run.domain)
        if base is not None and f.tasks < base:
            problems.append(
                f"run #{f.run.pk} ({f.run.domain}) has {f.tasks} of the {base} tasks (a --task-ids or --num-tasks "
                "subset)"
            )
        elif f.short_tasks:
            problems.append(f"run #{f.run.pk} ({f.run.domain}): {f.short_tasks} task(s) short of {f.run.num_trials} simulations")
    if problems:
        return Line(FAIL, req, "; ".join(problems))
    return Line(PASS, req, "; ".join(f"{f.run.domain} {f.tasks} tasks" for f in facts))


def _trials(runs: Sequence[BenchmarkRun]) -> Line:
    req = f"at least {MIN_TRIALS} trials"
    few = [r for r in runs if r.num_trials < MIN_TRIALS]
    if few:
        return Line(FAIL, req, "; ".join(f"run #{r.pk} ({r.domain}) has {r.num_trials} trial(s)" for r in few))
    return Line(PASS, req, "; ".join(f"{r.domain} {r.num_trials}" for r in runs))


def _split(runs: Sequence[BenchmarkRun]) -> Line:
    req = "base split"
    problems = []
    for r in runs:
        if r.task_split and r.task_split != "base":
            problems.append(f"run #{r.pk} ({r.domain}) ran split {r.task_split}")
        elif not r.task_split:
            problems.append(f"run #{r.pk} ({r.domain}) records no split and its tasks are not the base split's")
    if problems:
        return Line(FAIL, req, "; ".join(problems))
    return Line(PASS, req, "every run: base")


def _diff(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two JSON values differ, as dotted paths (values not shown: args may hold anything)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in sorted(set(a) | set(b), key=str):
            out += _diff(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
        return out
    return [] if a == b else [path or "(the whole)"]


def _same_participants(runs: Sequence[BenchmarkRun]) -> Line:
    req = "same agent and user simulator"
    first = runs[0] if runs else None
    if first is None:
        return Line(FAIL, req, "no run")
    problems = []
    for r in runs[1:]:
        for side, model_a, model_b, args_a, args_b in (
            ("agent", first.agent_model, r.agent_model, first.agent_args, r.agent_args),
            ("user simulator", first.user_model, r.user_model, first.user_args, r.user_args),
        ):
            if model_a != model_b:
                problems.append(f"the {side} is {model_a} in run #{first.pk}, {model_b} in run #{r.pk}")
            # The kit's per-run session header differs by design (the copies hold "[per run]").
            diff = [d for d in _diff(args_a, args_b) if not d.lower().endswith("extra_headers.x-marina-session")]
            if diff:
                problems.append(f"the {side}'s args differ between run #{first.pk} and #{r.pk} at {', '.join(diff)}")
    if problems:
        return Line(FAIL, req, "; ".join(problems) + " (τ² refuses a set whose models or llm args differ)")
    effort = reasoning_effort(first.agent_args)
    return Line(
        PASS, req,
        f"agent {first.agent_model}" + (f" (effort {effort})" if effort else "") + f", user {first.user_model}"
        + ("" if len(runs) == 1 else f", identical args in all {len(runs)} runs"),
    )  # fmt: skip


def _submission_type(runs: Sequence[BenchmarkRun], asked: str) -> Line:
    req = "submission type"
    arms = [arm_of(r) for r in runs]
    kinds = {a.submission_type for a in arms}
    arm = arms[0] if arms else Arm(STANDARD, "")
    if len(kinds) > 1:
        return Line(FAIL, req, "the runs mix standard and custom agents")
    if asked == STANDARD and arm.custom:
        return Line(
            FAIL, req,
            f"--submission-type standard, but the agent adds {', '.join(arm.layers)}: the board counts any added "
            "control flow as custom",
        )  # fmt: skip
    if arm.custom:
        return Line(
            PASS, req,
            f"custom ({', '.join(arm.layers)} around {arm.base_model}); methodology notes generated from the run "
            "for you to complete, with references to add",
        )  # fmt: skip
    if asked == CUSTOM:
        return Line(PASS, req, "custom, as --submission-type asks (the agent itself is a plain model)")
    return Line(PASS, req, f"standard ({arm.base_model} through τ²'s default agent)")


def _keys(runs: Sequence[BenchmarkRun], keys_left: dict[int, list[str]] | None) -> Line:
    req = "no key in files"
    if keys_left is None:
        return Line(WARN, req, "no results file given: the files could not be scrubbed and searched")
    found = [(r, keys_left.get(r.pk)) for r in runs]
    missing = [r for r, where in found if where is None]
    if missing:
        return Line(FAIL, req, f"no results file for run {_names(missing)}")
    dirty = [(r, where) for r, where in found if where]
    if dirty:
        detail = "; ".join(f"run #{r.pk}: {', '.join(where[:5])}" for r, where in dirty if where)
        return Line(FAIL, req, f"a key is still in the scrubbed copy ({detail}); remove it from the results file")
    return Line(PASS, req, "τ²'s api_key removed from every copy; no key-shaped or known secret left")


def _clean(runs: Sequence[BenchmarkRun]) -> Line:
    req = "no infrastructure errors"
    problems = []
    for r in runs:
        if r.infra_errors:
            problems.append(f"run #{r.pk} ({r.domain}) has {r.infra_errors} infrastructure error(s)")
        if r.skipped:
            problems.append(f"run #{r.pk} ({r.domain}) has {r.skipped} skipped sample(s) (failed model calls)")
        if r.status == "invalid":
            problems.append(f"run #{r.pk} ({r.domain}) is marked invalid: {r.invalid_reason}")
    if problems:
        return Line(FAIL, req, "; ".join(problems) + ": re-run")
    return Line(PASS, req, f"{sum(r.simulations for r in runs)} simulation(s), none failed")


def _costs(runs: Sequence[BenchmarkRun]) -> Line:
    req = "cost"
    parts, missing = [], False
    for r in runs:
        c = domain_cost(r)
        if c.usd is None:
            missing = True
            parts.append(f"{r.domain}: missing ({c.note})")
        else:
            parts.append(f"{r.domain}: ${c.usd} per trajectory ({c.note}; {cost_includes(r)})")
    return Line(WARN if missing else PASS, req, "; ".join(parts))


# -- what Marina fills in ----------------------------------------------------------------------


@dataclass(frozen=True)
class Cost:
    usd: Decimal | None  # average per trajectory; None when unknown (never 0 for unknown)
    note: str


def _agent_links(run: BenchmarkRun) -> Any:
    return BenchmarkItemTrace.objects.filter(item__run=run, role=BenchmarkItemTrace.Role.AGENT)


def domain_cost(run: BenchmarkRun) -> Cost:
    """The agent's cost per trajectory from Marina's own spend of the calls linked to the run's
    items (τ²'s `avg_agent_cost` is the agent's too). Missing when an item has no linked agent
    call or a linked call is unpriced: a lower bound is not a cost."""
    items = run.items.filter(infra_error=False)
    n = items.count()
    if not n:
        return Cost(None, "no evaluated simulation")
    unlinked = items.exclude(pk__in=_agent_links(run).values("item_id")).count()
    if unlinked:
        return Cost(None, f"{unlinked} of {n} trajectories have no linked agent call")
    traces = Trace.objects.filter(pk__in=_agent_links(run).values("trace_id"))
    totals = traces.aggregate(cost=Sum("cost_nanousd"), calls=Count("pk"), unpriced=Count("pk", filter=Q(cost_nanousd=None)))
    if totals["unpriced"]:
        return Cost(None, f"{totals['unpriced']} of {totals['calls']} linked agent calls are unpriced")
    per = money.to_usd(round((totals["cost"] or 0) / n))
    return Cost(per, f"{totals['calls']} linked agent call(s) over {n} trajectories, Marina's spend")


def cost_includes(run: BenchmarkRun) -> str:
    """What a domain's cost holds and what it leaves out: the agent's calls only (the board's field, as
    τ²'s own avg_agent_cost), not the user simulator's nor τ²'s own (embeddings, reranker, judge)."""
    n = run.items.filter(infra_error=False).count() or 1
    left_out = []
    for c in callers.by_caller(run):
        if c.who == "agent" or not c.calls:
            continue
        per = money.with_unpriced(None if c.cost_nanousd is None else round(c.cost_nanousd / n), c.unpriced)
        models = f": {', '.join(c.models)}" if c.models else ""
        left_out.append(f"{c.who} {per} per trajectory ({c.calls} call(s){models})")
    return "the agent's calls only" + (f"; not included: {'; '.join(left_out)}" if left_out else "")


def usd_number(value: Decimal | None) -> float | None:
    """The board's cost field: dollars as a JSON number, to the nano-dollar."""
    return None if value is None else float(value)


def models_called(run: BenchmarkRun) -> list[str]:
    """`draft: openrouter oracle-agent ×120`: each step of the agent's linked calls and the model it called."""
    rows = (
        Span.objects.filter(trace__in=_agent_links(run).values("trace_id"))
        .values("name", "provider", "upstream_model")
        .annotate(n=Count("pk"))
        .order_by("-n", "name")
    )
    # A step without an upstream model (lessons recall, the formation's own span) calls none.
    return [
        f"{r['name']}: {r['provider'] + ' ' if r['provider'] else ''}{r['upstream_model']} ×{r['n']}"
        if r["upstream_model"] else f"{r['name']} ×{r['n']} (no model call)"
        for r in rows
    ]


def outcomes(run: BenchmarkRun) -> list[str]:
    """The formation's label per agent call (x-marina-verify: approved, revised, …), counted."""
    rows = (
        Trace.objects.filter(pk__in=_agent_links(run).values("trace_id")).exclude(formation_label="")
        .values("formation_label").annotate(n=Count("pk")).order_by("-n", "formation_label")
    )  # fmt: skip
    return [f"{r['formation_label']} {r['n']}" for r in rows]


def methodology_notes(runs: Sequence[BenchmarkRun], *, settings: dict[str, Any] | None = None) -> str:
    """Notes for a person to complete: what the agent does (the formation's steps, the models
    it called, the settings recorded on the runs), how the cost was counted, what is left to say."""
    run = runs[0]
    arm = arm_of(run)
    out = [
        f"[{FILL_IN}: say what was changed, why, and how the system works; the text below was generated "
        "by Marina from its ledger and is a starting point.]",
    ]
    if arm.custom:
        out.append(
            f"Agent: τ²'s default LLM agent whose model calls go to `{run.agent_model}` on Marina, an "
            f"OpenAI-compatible gateway that wraps them in {', '.join(arm.layers)} around {arm.base_model}."
        )
        out += [f"- {s}." for s in arm.steps]
    else:
        out.append(f"Agent: τ²'s default LLM agent, model `{run.agent_model}`, called through Marina (a pass-through gateway).")
    for r in runs:
        called = models_called(r)
        if called:
            out.append(f"Calls made for the agent in {r.domain} (run #{r.pk}, linked traces): " + "; ".join(called) + ".")
        labels = outcomes(r)
        if labels:
            out.append(f"Formation outcomes in {r.domain}: " + ", ".join(labels) + ".")
    effort = reasoning_effort(run.agent_args)
    user_effort = reasoning_effort(run.user_args)
    recorded = [f"agent reasoning effort {effort or 'not set'}", f"user simulator {run.user_model} effort {user_effort or 'not set'}"]
    recorded.append(f"{run.num_trials} trials, seed {run.seed if run.seed is not None else 'not recorded'}")
    for k, v in sorted((settings or {}).items()):
        recorded.append(f"{k} {v}")
    out.append("Settings recorded on the run: " + "; ".join(recorded) + ".")
    out.append(
        "Cost: the agent's calls as Marina priced them (its own spend of the calls linked to each "
        "trajectory), averaged per trajectory; left empty where a call was unpriced. Not included: the user "
        "simulator's calls and τ²'s own (banking's embeddings and reranker, the NL-assertion judge)."
    )
    for r in runs:
        if r.retrieval_config:
            out.append(f"Retrieval config in {r.domain}: {r.retrieval_config}.")
    return "\n".join(out)


def omitted_questions(runs: Sequence[BenchmarkRun]) -> bool:
    return any(RunFacts.of(r).tasks < BASE_SPLIT_TASKS.get(r.domain, 0) for r in runs)


def board_view(runs: Sequence[BenchmarkRun], lines: Sequence[Line]) -> list[str]:
    """What the board will show of a set that fails a check (--allow-incomplete)."""
    failed = {ln.requirement for ln in lines if ln.status == FAIL}
    shown = [d for d in TEXT_DOMAINS if any(r.domain == d for r in runs)]
    out = [f"ranked in {', '.join(shown) or 'no domain'} only" if len(shown) < len(TEXT_DOMAINS) else "ranked in every domain"]
    trials = min((r.num_trials for r in runs), default=0)
    if trials < MIN_TRIALS:
        out.append(f"pass^1..pass^{trials} only: pass^{trials + 1}..pass^4 empty")
    if "all tasks" in failed or "base split" in failed:
        out.append("omitted_questions: true, so the entry is Unverified (a caution icon), and its scores are not "
                   "comparable with complete entries")  # fmt: skip
    if "no infrastructure errors" in failed:
        out.append("failed simulations counted as failures in pass^k: the scores understate the agent")
    if "same agent and user simulator" in failed or "one result per domain" in failed:
        out.append("τ² itself refuses this set (prepare and validate stop at it): nothing the board can show")
    if any(arm_of(r).custom for r in runs):
        out.append("a Custom entry, with the methodology notes and references you write")
    return out


# -- credentials left in a file ----------------------------------------------------------------


def keys_left(path: str | Path, *, known: Collection[str] = (), hashed: Collection[str] = ()) -> list[str]:
    """Where a credential still is in a JSON file, as paths (never the value): a credential-named
    key whose value is not "[redacted]", a key-shaped string (`sk-…`, `Bearer …`), one of the
    secrets this Marina knows (`known`), or a token whose SHA-256 is a Marina key's (`hashed`)."""
    found: list[str] = []
    secret_key_at: str | None = None
    known = [k for k in known if len(k) >= 8]
    with open(path, "rb") as f:
        for prefix, event, value in ijson.parse(f):
            if event == "map_key":
                name = str(value)
                secret_key_at = (f"{prefix}.{name}" if prefix else name) if is_secret_key(name) else None
                continue
            if secret_key_at is not None:  # the value of a credential-named key
                if not (event in ("string", "null") and value in (None, "", REDACTED)):
                    found.append(secret_key_at)
                secret_key_at = None
                if event == "string":
                    continue
            if event == "string" and value:
                if SECRET_VALUES.search(value) or any(k in value for k in known) or _hashes_to(value, hashed):
                    found.append(prefix or "(top)")
    return list(dict.fromkeys(found))


def _hashes_to(text: str, hashed: Collection[str]) -> bool:
    if not hashed or len(text) > 4096:
        return False
    for token in text.split():
        if 16 <= len(token) <= 200 and hashlib.sha256(token.encode()).hexdigest() in hashed:
            return True
    return False


@dataclass
class Fill:
    """What Marina wrote into τ²'s submission.json, and what it could not place."""

    written: list[str] = field(default_factory=list)
    for_a_person: list[str] = field(default_factory=list)
    not_in_schema: list[str] = field(default_factory=list)


def fill(submission: dict[str, Any], schema: dict[str, Any], runs: Sequence[BenchmarkRun], *,
         submission_type: str, notes: str, tau2_version: str, user_simulator: str = "") -> Fill:  # fmt: skip
    """Fill `submission` (τ²'s own, as its prepare wrote it) in place with what τ² cannot know, each
    field only where τ²'s schema (read from the installed τ² at run time) has a place for it."""
    done = Fill()
    top = _properties(schema, schema)
    methodology_schema = _def(schema, "Methodology")
    meth_props = _properties(schema, methodology_schema)
    domain_props = _properties(schema, _def(schema, "DomainResults"))

    _fill_results(submission.setdefault("results", {}), domain_props, runs, done)
    if "submission_type" in top:
        submission["submission_type"] = submission_type
        done.written.append(f"submission_type = {submission_type}")
    else:
        done.not_in_schema.append(f"submission_type ({submission_type})")
    if "methodology" in top:
        meth = submission.get("methodology") or {}
        submission["methodology"] = meth
        meth["notes"] = (f"Submission type: {submission_type} (Marina).\n" if "submission_type" not in top else "") + notes
        done.written.append("methodology.notes (generated; to complete)")
        done.for_a_person.append("methodology.notes")
        if "tau2_bench_version" in meth_props and not meth.get("tau2_bench_version"):
            meth["tau2_bench_version"] = tau2_version
        if "evaluation_date" in meth_props and not meth.get("evaluation_date"):
            started = min((r.started_at for r in runs if r.started_at), default=None)
            if started is not None:
                meth["evaluation_date"] = started.date().isoformat()
        if "user_simulator" in meth_props and not meth.get("user_simulator"):
            # As τ² names it (its validate compares it with the trajectories' user llm).
            meth["user_simulator"] = user_simulator or runs[0].user_model
        if "verification" in meth_props:
            arm = arm_of(runs[0])
            meth["verification"] = {
                "modified_prompts": arm.modified_prompts,
                "omitted_questions": omitted_questions(runs),
                "details": f"[{FILL_IN}] " + ("; ".join(arm.steps) if arm.custom else "τ²'s standard configuration"),
            }
    if submission_type == CUSTOM:
        if "references" in top:
            submission["references"] = [
                {"title": f"{FILL_IN}: the implementation of the custom agent", "url": f"{FILL_IN}: https://…",
                 "type": "github"},
            ]  # fmt: skip
            done.for_a_person.append("references")
        else:
            done.not_in_schema.append("references (link the implementation in methodology.notes)")
    for name, what in (
        ("organization", "the organization that developed the model"),
        ("model_organization", "the organization that developed the model"),
        ("submitting_organization", "the organization that ran the evaluation"),
    ):
        if name in top:
            submission[name] = f"{FILL_IN}: {what}"
            done.for_a_person.append(name)
    contact = submission.get("contact_info")
    if isinstance(contact, dict) or "contact_info" in top:
        contact = contact if isinstance(contact, dict) else {}
        contact["email"] = f"{FILL_IN}: contact email"
        submission["contact_info"] = contact
        done.for_a_person.append("contact_info.email")
    return done


def _fill_results(results: dict[str, Any], domain_props: dict[str, Any], runs: Sequence[BenchmarkRun], done: Fill) -> None:
    """Per domain: the cost (saying what it includes) and banking's retrieval config, where the schema has them."""
    for r in runs:
        entry = results.setdefault(r.domain, {})
        if "cost" in domain_props:
            c = domain_cost(r)
            entry["cost"] = usd_number(c.usd)
            shown = f"null (missing: {c.note})" if c.usd is None else f"{c.usd} ({cost_includes(r)})"
            done.written.append(f"results.{r.domain}.cost = {shown}")
        if "retrieval_config" in domain_props and r.domain in RETRIEVAL_DOMAINS and r.retrieval_config:
            entry["retrieval_config"] = r.retrieval_config
            done.written.append(f"results.{r.domain}.retrieval_config = {r.retrieval_config} (the run's)")


def _def(schema: dict[str, Any], name: str) -> dict[str, Any]:
    defs = schema.get("$defs") or schema.get("definitions") or {}
    found = defs.get(name)
    return found if isinstance(found, dict) else {}


def _properties(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    props = node.get("properties")
    return props if isinstance(props, dict) else {}


def dumps(submission: dict[str, Any]) -> str:
    return json.dumps(submission, indent=2, ensure_ascii=False) + "\n"
