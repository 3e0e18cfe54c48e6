"""The shapes of the /api answers (and of a benchmark upload's), as pydantic
models Ninja answers with: docs/openapi.json tells a client what each operation returns, and
docs/api.md says what the fields mean. The data itself is built where the pages
and the command line build it (ledger/reports/jsondata.py, compare_json.py,
frontier.py, trajectories.py, live.py; ledger/benchmarks/importers.py); these
classes only type it. Ninja validates each answer against its schema.

Money is a decimal string of dollars (`null`: unknown or unpriced), times are
ISO 8601 strings in UTC, days YYYY-MM-DD, rates plain floats. An answer may carry
a field added since (`additionalProperties`): tests/marina/test_read_schemas.py
holds the answers the tests make to the committed schema, key by key."""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

Usd = Annotated[str | None, Field(description="dollars as a decimal string; null when unknown or unpriced")]
Time = Annotated[str | None, Field(description="ISO 8601, UTC")]
Day = Annotated[str, Field(description="a UTC day, YYYY-MM-DD")]
Interval = Annotated[list[float] | None, Field(description="[lo, hi]; null when there is nothing to estimate")]


class Answer(BaseModel):
    # A field the code adds before the schema knows it still goes out (documented as
    # additionalProperties); the tests' answers are held to the schema key by key.
    # pydantic's BaseModel, not ninja.Schema: a Schema reads a dict through its declared
    # fields only, and would drop such a field without a word.
    model_config = ConfigDict(extra="allow")


# --- /api/runs, /api/runs/{id} -------------------------------------------------------


class RunSummary(Answer):
    id: int
    benchmark: str
    domain: str
    target_kind: str = Field(description="model | crew")
    target: str
    group: str
    label: str
    status: str
    invalid_reason: str
    judge: str
    seed: int | None
    task_split: str
    retrieval_config: str | None = Field(
        description="banking_knowledge: τ²'s --retrieval-config (how the agent searched its knowledge base); "
        "null elsewhere. Runs that differ in it are not comparable"
    )
    retrieval_config_kwargs: dict[str, Any] = Field(description="the arguments the retrieval config was built with")
    num_trials: int
    agent_model: str
    user_model: str
    tau2_version: str
    simulations: int
    evaluated: int = Field(description="simulations less infrastructure errors")
    infra_errors: int
    skipped: int
    mean_reward: float | None
    pass_hat_k: list[float] = Field(description="pass^k for k = 1, 2, …")
    cost_usd: Usd
    cost_per_item_usd: Usd
    cost_source: str
    comparable: bool
    comparability_reasons: list[str]
    source_name: str
    started_at: Time
    ended_at: Time
    created_at: Time


class RunPage(Answer):
    count: int
    page: int
    per_page: int
    pages: int
    runs: list[RunSummary] = Field(description="newest first")


class Figures(Answer):
    simulations: int
    infra_errors: int
    tasks: int
    mean_reward: float | None
    pass_hat_k: list[float]


class CurvePoint(Answer):
    k: int
    value: float
    lo: float
    hi: float


class Curve(Answer):
    confidence: float
    points: list[CurvePoint]


class Termination(Answer):
    reason: str
    count: int
    infra: int = Field(description="of them, infrastructure errors")


class RunItem(Answer):
    item_id: str = Field(description="<task>#<trial>")
    task_id: str
    trial: int
    reward: float | None
    correct: bool
    infra_error: bool
    skipped: bool
    termination_reason: str
    duration_s: float | None
    link_status: str
    trace_calls: int
    trace_errors: int
    trace_unpriced: int
    trace_prompt_tokens: int
    trace_completion_tokens: int
    trace_cost_usd: Usd
    decisions: dict[str, Any] = Field(description="per formation, its label on the item's calls")
    formation_counters: dict[str, Any]


class RunDetail(RunSummary):
    cost_source_label: str
    agent_args: dict[str, Any] = Field(description="τ²'s agent arguments, credentials removed")
    user_args: dict[str, Any]
    figures: Figures = Field(description="recomputed from the items")
    curve: Curve
    terminations: list[Termination]
    items: list[RunItem]


# --- /api/compare ----------------------------------------------------------------------


class CompareSide(Answer):
    run_ids: list[int]
    label: str
    items: int
    mean_reward: float | None
    pass_hat_k: list[float]
    pass1_ci: list[float] = Field(description="Wilson 95 %, [lo, hi]")
    cost_per_item_usd: Usd
    unpriced_calls: int


class Replicates(Answer):
    a_runs: int
    b_runs: int
    a_pass1: list[float]
    b_pass1: list[float]
    a_sd: float | None
    b_sd: float | None
    a_agree: float
    b_agree: float
    diff: float
    bootstrap_p: float
    mcnemar_p_range: list[float]
    pairs: int


class TaskDiff(Answer):
    task_id: str
    a_successes: int
    a_trials: int
    b_successes: int
    b_trials: int
    diff: float


class DecisionRow(Answer):
    side: str = Field(description="A or B")
    decision: str
    items: int
    successes: int
    other_successes: int | None = Field(description="two runs: the other side's successes on the same items")
    diff: float | None = Field(description="B − A on these items (two runs only)")


class Comparison(Answer):
    sign: str = Field(description="every difference is B − A")
    a: CompareSide
    b: CompareSide
    shared_items: int
    shared_tasks: int
    warnings: list[str]
    a_only: int
    b_only: int
    mcnemar_p: float
    diff_pass1: float
    diff_ci: list[float]
    bootstrap: str
    tasks: list[TaskDiff]
    replicates: Replicates | None = Field(description="groups only")
    decisions: list[DecisionRow]
    smallest_detectable: float | None = Field(
        description="the smallest pass^1 difference these runs could detect (80 % power, α 0.05); null when it "
        "cannot be estimated"
    )
    verdict: str = Field(description="the interval read in words (docs/comparisons.md)")


# --- /api/spend --------------------------------------------------------------------------


class ModelSpend(Answer):
    model: str
    calls: int
    errors: int
    unpriced_calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: Usd


class SpendTotal(Answer):
    calls: int
    errors: int
    unpriced_calls: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    reasoning_tokens: int
    cost_usd: Usd


class SpendRow(Answer):
    day: Day
    requested_model: str
    calls: int
    errors: int
    unpriced_calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: Usd


class Spend(Answer):
    since: Day
    until: Day
    first_day: str | None = Field(description="the first day with spend, YYYY-MM-DD")
    last_day: str | None
    models: list[ModelSpend]
    total: SpendTotal
    days: list[Day]
    cost_usd_by_day: dict[str, list[str]] = Field(description="model -> dollars per day, aligned with `days`")
    rows: list[SpendRow] = Field(description="day × model")


# --- /api/traces/{request_id} --------------------------------------------------------


class TraceItem(Answer):
    run_id: int
    item_id: str
    role: str


class TraceSpan(Answer):
    seq: int
    parent_seq: int | None
    depth: int
    name: str
    provider: str
    upstream_model: str
    status: str
    http_status: int | None
    error_kind: str
    offset_ms: float
    duration_ms: float
    ttft_ms: float | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    reasoning_tokens: int
    cost_usd: Usd
    cost_source: str
    detail: dict[str, Any] = Field(description="the formation's decisions, the step")
    body: Any = Field(description="the call's body when stored (redacted), else null")


class TraceDetail(Answer):
    request_id: str
    started_at: Time
    duration_ms: float
    overhead_ms: float | None
    method: str
    path: str
    key_name: str
    requested_model: str
    route: str
    formation_label: str
    session: str
    stream: bool
    status: str
    http_status: int
    error_kind: str
    error_message: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: Usd
    body: Any = Field(description="the request's body when stored (redacted), else null")
    items: list[TraceItem] = Field(description="the benchmark items the call served")
    spans: list[TraceSpan] = Field(description="in tree order")


# --- /api/frontier ------------------------------------------------------------------------


class FrontierPoint(Answer):
    key: str = Field(description="run:<id>, group:<name>, or group:<name>|<target> for a group holding several targets")
    label: str
    target: str
    arm: str
    group: str
    run_ids: list[int]
    simulations: int
    tasks: int
    cost_usd: Usd
    cost_per_simulation_usd: Usd
    cost_basis: str
    pass_hat_k: float | None
    interval: Interval
    on_frontier: bool
    settings: dict[str, Any] = Field(description="what points on one frontier share besides the task set: split, trials")
    apart: str = Field(description="why the point is not on this frontier's cohort ('' when it is)")


class Neighbours(Answer):
    cheaper: str = Field(description="a point's key")
    dearer: str
    diff: float = Field(description="dearer's pass^k − cheaper's")
    distinguishable: bool
    smallest_detectable: float


class Frontier(Answer):
    benchmark: str
    k: int
    by: str = Field(description="run | group")
    total: int
    shown: int
    limit: int
    interval: str
    cohort: str = Field(description="what the frontier's points share: task count, split, trials")
    points: list[FrontierPoint]
    frontier: list[str] = Field(description="the keys of the points on the Pareto frontier")
    neighbours: list[Neighbours] = Field(description="each frontier point against the next dearer one")


# --- /api/trajectories --------------------------------------------------------------------


class TrajectoryMessage(Answer):
    role: str
    text: str
    tool_calls: list[dict[str, Any]]


class TrajectoryCall(Answer):
    name: str
    model: str
    status: str


class Intervention(Answer):
    kind: str = Field(description="review | revised | held-write | nudge | obligations-judge | argcheck")
    text: str


class TrajectoryTurn(Answer):
    n: int
    request_id: str
    status: str
    formation_label: str
    cost_usd: Usd = Field(description="agent + user simulator; null when a call was unpriced")
    agent_cost_usd: Usd
    user_cost_usd: Usd
    user_calls: int
    messages: list[TrajectoryMessage] | None = Field(description="null when no body was stored")
    calls: list[TrajectoryCall]
    tools: list[dict[str, Any]] = Field(description="argcheck's tool and argument names")
    interventions: list[Intervention]


class RewardRow(Answer):
    check: str
    result: str
    reward: Any = Field(description="τ²'s figure for the component, as its results file has it")
    counts: bool = Field(description="whether τ² counted it in the reward")
    missed: list[str] = Field(description="the expected actions' tool names the simulation missed (empty but for actions)")


class TrajectorySide(Answer):
    run_id: int
    target: str
    group: str
    item: str
    trial: int
    outcome: str
    reward: float | None
    link_status: str
    cost_usd: Usd
    reward_breakdown: list[RewardRow]
    turns: list[TrajectoryTurn]
    more_turns: int


class Trajectories(Answer):
    task_id: str
    disagree: bool
    a: TrajectorySide
    b: TrajectorySide


# --- /api/experiments/{id}/progress -------------------------------------------------


class ArmProgress(Answer):
    arm: str
    agent_model: str
    planned: int | None
    finished: int
    started_in_traces: int
    evaluated: int
    passed: int
    pass_hat_1: float | None
    interval: Interval
    interval_simulations: int = Field(description="the simulations the interval rests on")
    infra_errors: int
    warning: str
    spent_usd: Usd
    spent_basis: str = Field(description="the experiment's: priced | fallback price | lower bound | unknown")
    running: bool
    eta_seconds: float | None


class ExperimentProgress(Answer):
    experiment: str
    status: str
    spent_usd: Usd = Field(description="what the budget counted; null when no call was priced and there was no fallback price")
    spent_basis: str = Field(
        description="priced | fallback price (unpriced calls at --unpriced-usd-per-mtok: not a bill) | lower bound | unknown"
    )
    spent_note: str = Field(description="the basis in words ('' when every call was priced)")
    unpriced_calls: int
    fallback_usd_per_mtok: str | None = Field(description="the kit's --unpriced-usd-per-mtok, as given")
    budget_usd: Usd
    eta_seconds: float | None
    as_of: Time
    arms: list[ArmProgress]


# --- /api/formations -----------------------------------------------------------------------


class FormationTemplate(Answer):
    template: str = Field(description="e.g. marina/verify:<model>")
    formation: str
    prefix: str
    about: str
    example: str


class Formations(Answer):
    templates: list[FormationTemplate]
    note: str


# --- POST /v1/benchmarks/runs ----------------------------------------------------------------


class Links(Answer):
    linked: int
    unfound: int
    ambiguous: int
    traces: int
    unassigned_traces: int
    within_keys: list[str] | None = Field(description="the keys whose traces the items were linked to; null: every key's")
    keys: list[str] = Field(description="the key names of the linked traces")


class ImportedRun(Answer):
    run_id: int | None = Field(description="null for a dry run")
    created: bool
    already_imported: bool
    dry_run: bool
    source: str
    sha256: str
    benchmark: str
    target_kind: str
    target: str
    group: str
    label: str
    agent_model: str
    user_model: str
    simulations: int
    evaluated: int
    infra_errors: int
    skipped: int
    mean_reward: float | None
    pass_hat_k: list[float]
    cost_usd: Usd
    cost_source: str
    unpriced_calls: int
    cost_note: str
    comparable: bool
    comparability_reasons: list[str]
    started_at: Time
    ended_at: Time
    judge: str
    retrieval_config: str | None = Field(description="banking_knowledge: τ²'s --retrieval-config; null elsewhere")
    retrieval_config_kwargs: dict[str, Any]
    status: str
    links: Links | None = Field(description="the items linked to Marina's traces; null for a dry run")
    links_note: str
    warnings: list[str]
