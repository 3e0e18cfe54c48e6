"""The JSON read API under /api: the report pages' figures for scripts and
dashboards. Each operation parses its parameters, calls the selector the page
(or the command line) uses, and returns ledger.reports.jsondata's shape.

Who may read what (docs/security.md): a Marina key (`Authorization: Bearer
<key>`, as /v1) reads its own traces and spend (an operator key: its callers'
too), and every key reads runs and comparisons; a key made with `create_key
--read-all` reads every key's. A logged-in staff session (the admin's login)
reads what its Django permissions let it see in the admin: `view_trace` the
traces, `view_spenddaily` the spend, `view_benchmarkrun` runs and comparisons;
without, 403, as in the admin. A session that is not staff gets 403; nobody,
401. Another key's trace is a 404, as an unknown one: a key learns nothing of
ids it cannot read. An open API (MARINA_OPEN_API, no keys) opens /v1, not the
ledger: it still needs a staff session. Errors use OpenAI's envelope.

Lives in marina/ because it needs passthru's key check and the ledger's reads
(ledger never imports passthru)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from typing import Annotated, Any

from asgiref.sync import async_to_sync
from django.http import HttpRequest
from ninja import Path as PathParam
from ninja import Query, Router, Schema
from ninja.security import HttpBearer
from pydantic import BeforeValidator, Field

from ledger.benchmarks import owners as run_owners
from ledger.benchmarks import stats
from ledger.benchmarks.compare import CompareError, SameSides, compare_groups, compare_runs
from ledger.models import BenchmarkRun
from ledger.reports import jsondata, selectors
from ledger.reports.compare_json import as_json
from ledger.reports.forms import SpendRangeForm
from ledger.spend import selectors as spend_selectors
from ledger.spend.selectors import owns
from marina.read_schemas import (
    Comparison,
    ExperimentProgress,
    Frontier,
    RunDetail,
    RunPage,
    Spend,
    TraceDetail,
    Trajectories,
)
from passthru import auth
from passthru.errors import ApiError
from passthru.schemas import ErrorEnvelope

ERRORS: dict[int, Any] = {400: ErrorEnvelope, 401: ErrorEnvelope, 403: ErrorEnvelope, 404: ErrorEnvelope}
MAX_PER_PAGE = 200
MAX_ID = 2**63 - 1  # a larger id is no row's (and SQLite could not even compare it)
MAX_PAGE = 1_000_000  # past it the offset would overflow the database's integers


def _iso_day(value: Any) -> Any:
    """YYYY-MM-DD only: pydantic alone would read `0` as 1970-01-01 (a Unix time)."""
    if isinstance(value, str) and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        raise ValueError("a UTC day as YYYY-MM-DD")
    return value


Day = Annotated[date, BeforeValidator(_iso_day)]


def _bad(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, code="invalid_request_error", param=param)


def _not_found(message: str) -> ApiError:
    return ApiError(404, message, code="not_found")


@dataclass(frozen=True)
class Scope:
    """What one reader may read. `owner`: a key that reads only its own traces
    and spend (ledger.spend.selectors.owned_by); None: every key's."""

    who: str
    owner: str | None
    traces: bool
    spend: bool
    runs: bool
    experiments: bool = True  # staff: view_experiment (the experiment pages' permission)


def scope_of(request: HttpRequest) -> Scope:
    scope = request.auth  # type: ignore[attr-defined]  # set by Reader
    assert isinstance(scope, Scope)
    return scope


def _denied(what: str) -> ApiError:
    return ApiError(403, f"Reading {what} needs the same permission as in the admin.", code="permission_denied")


class Reader(HttpBearer):
    """A Marina key or a staff session, else ApiError 401/403 (in the envelope:
    Ninja hands an auth's exception to marina/api.py's handlers). Runs before
    the parameters are read, so a stranger learns nothing from a 400."""

    openapi_description = (
        "a Marina key (create_key or MODEL_API_KEYS): its own traces and spend, or all with create_key --read-all; "
        "a staff session cookie also works, within its admin permissions"
    )

    def __call__(self, request: HttpRequest) -> Scope:
        header = request.headers.get("authorization")
        if header:
            caller = async_to_sync(auth.authenticate)(header)  # 401 for a wrong key
            if caller.keyed:
                owner = None if caller.reads_all else caller.owner
                return Scope(caller.owner, owner, traces=True, spend=True, runs=True)
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            if user.is_staff:
                return Scope(
                    f"staff:{user.get_username()}",
                    None,
                    traces=user.has_perm("ledger.view_trace"),
                    spend=user.has_perm("ledger.view_spenddaily"),
                    runs=user.has_perm("ledger.view_benchmarkrun"),
                    experiments=user.has_perm("ledger.view_experiment"),
                )
            raise ApiError(403, "The read API needs a staff account or a Marina key.", code="permission_denied")
        raise ApiError(401, "Send 'Authorization: Bearer <Marina key>', or log in as staff at /admin/.")

    def authenticate(self, request: HttpRequest, token: str) -> str | None:  # __call__ does it all
        return None


router = Router(tags=["read"], auth=Reader())


class RunFilters(Schema):
    group: str = Field("", description="a replicate group, exactly")
    benchmark: str = Field("", description="e.g. tau2-airline")
    target: str = Field("", description="the model or crew id measured")
    since: Day | None = Field(None, description="imported on or after this UTC day")
    until: Day | None = Field(None, description="imported on or before this UTC day")
    page: int = Field(1, ge=1, le=MAX_PAGE)
    per_page: int = Field(25, ge=1, le=MAX_PER_PAGE)


@router.get("/runs", response={200: RunPage, **ERRORS}, summary="Benchmark runs, newest first (the runs page's filters)")
def list_runs(request: HttpRequest, filters: Query[RunFilters]) -> dict[str, Any]:
    if not scope_of(request).runs:
        raise _denied("runs")
    if filters.since and filters.until and filters.since > filters.until:
        raise _bad("`since` is after `until`.", "since")
    runs = selectors.runs(
        group=filters.group, benchmark=filters.benchmark, target=filters.target, since=filters.since, until=filters.until
    ).filter(run_owners.visible_to(scope_of(request).owner))  # another key's runs read as none
    return jsondata.run_page(runs, page=filters.page, per_page=filters.per_page)


@router.get("/runs/{run_id}", response={200: RunDetail, **ERRORS}, summary="One run: figures, pass^k with intervals, items")
def get_run(request: HttpRequest, run_id: int = PathParam(..., ge=1, le=MAX_ID)) -> dict[str, Any]:
    if not scope_of(request).runs:
        raise _denied("runs")
    run = BenchmarkRun.objects.filter(run_owners.visible_to(scope_of(request).owner), pk=run_id).first()
    if run is None:
        raise _not_found(f"No run #{run_id}.")
    return jsondata.run_detail(selectors.run_report(run))


class CompareQuery(Schema):
    a: int | None = Field(None, ge=1, le=MAX_ID, description="run A's id (with b)")
    b: int | None = Field(None, ge=1, le=MAX_ID, description="run B's id")
    group_a: str = Field("", description="group A (with group_b), instead of two runs")
    group_b: str = Field("", description="group B")
    seed: int = Field(0, ge=-MAX_ID, le=MAX_ID)
    resamples: int = Field(2000, ge=1, le=stats.MAX_RESAMPLES)


@router.get("/compare", response={200: Comparison, **ERRORS}, summary="Run (or group) B against A: `manage.py compare --json`")
def compare(request: HttpRequest, query: Query[CompareQuery]) -> dict[str, Any]:
    if not scope_of(request).runs:
        raise _denied("runs")
    visible = BenchmarkRun.objects.filter(run_owners.visible_to(scope_of(request).owner))
    runs = query.a is not None or query.b is not None
    groups = bool(query.group_a or query.group_b)
    if runs == groups:
        raise _bad("Give two runs (`a` and `b`) or two groups (`group_a` and `group_b`).", "a")
    try:
        if runs:
            if query.a is None or query.b is None:
                missing = "a" if query.a is None else "b"
                raise _bad(f"`{missing}` is required with the other run.", missing)
            for run_id in (query.a, query.b):
                if not visible.filter(pk=run_id).exists():
                    raise _not_found(f"No run #{run_id}.")
            comparison = compare_runs(query.a, query.b, seed=query.seed, resamples=query.resamples)
        else:
            for name, group in (("group_a", query.group_a), ("group_b", query.group_b)):
                if not group:
                    raise _bad(f"`{name}` is required with the other group.", name)
            for group in (query.group_a, query.group_b):
                # A group with a run another key filed reads as none (no key files into another's group).
                in_group = BenchmarkRun.objects.filter(group=group)
                owner = scope_of(request).owner
                hidden = owner is not None and in_group.exclude(run_owners.visible_to(owner)).exists()
                if hidden or not in_group.exists():
                    raise _not_found(f"No runs in group {group!r}.")
            comparison = compare_groups(query.group_a, query.group_b, seed=query.seed, resamples=query.resamples)
    except SameSides as exc:  # one rule everywhere (ledger/benchmarks/compare.py): a 400 naming B
        raise _bad(str(exc), "b" if runs else "group_b") from None
    except CompareError as exc:  # invalid runs, nothing shared
        raise _bad(str(exc)) from None
    return as_json(comparison)


@router.get("/spend", response={200: Spend, **ERRORS}, summary="Spend per model and day (default: the last 14 UTC days)")
def spend(request: HttpRequest, since: Day | None = None, until: Day | None = None) -> dict[str, Any]:
    scope = scope_of(request)
    if not scope.spend:
        raise _denied("spend")
    form = SpendRangeForm.from_query(request.GET)  # the spend page's defaults and limits
    if not form.is_valid():
        field, errors = next(iter(form.errors.items()))
        # A range error (ends before it starts, too long) names `since`, as /api/runs does.
        raise _bad(f"{errors[0]}", "since" if field == "__all__" else field)
    first, last = form.range()
    totals = spend_selectors.spend_totals(since=first, until=last, owner=scope.owner)
    return jsondata.spend(totals, spend_selectors.spend_by_model(since=first, until=last, owner=scope.owner))


@router.get("/traces/{request_id}", response={200: TraceDetail, **ERRORS}, summary="One request's trace and its span tree")
def get_trace(request: HttpRequest, request_id: str) -> dict[str, Any]:
    scope = scope_of(request)
    if not scope.traces:
        raise _denied("traces")
    trace = selectors.trace_for(request_id, scope.owner)  # another key's trace reads as an unknown one
    if trace is None:
        raise _not_found(f"No trace with request id {request_id!r}.")
    return jsondata.trace(trace, selectors.span_tree(trace))


class FrontierQuery(Schema):
    benchmark: str = Field("", description="e.g. tau2-airline (default: the one with the most runs)")
    domain: str = Field("", description="e.g. airline")
    group: str = Field("", description="a replicate group, exactly")
    since: Day | None = Field(None, description="imported on or after this UTC day")
    until: Day | None = Field(None, description="imported on or before this UTC day")
    k: int = Field(1, ge=1, le=16, description="pass^k's k")
    by: str = Field("run", pattern="^(run|group)$", description="a point per run or per group")
    limit: int | None = Field(None, ge=1, le=500, description="the newest this many runs (default 100) or groups (default 20)")


@router.get("/frontier", response={200: Frontier, **ERRORS}, summary="Cost per simulation against pass^k, with the Pareto frontier")
def frontier(request: HttpRequest, query: Query[FrontierQuery]) -> dict[str, Any]:
    from ledger.reports import frontier as frontier_data  # the page's and `manage.py frontier`'s figures

    scope = scope_of(request)
    if not (scope.runs and scope.spend):
        raise _denied("runs and spend")
    if query.since and query.until and query.since > query.until:
        raise _bad("`since` is after `until`.", "since")
    try:
        result = frontier_data.frontier(
            benchmark=query.benchmark, domain=query.domain, group=query.group, since=query.since, until=query.until,
            k=query.k, by=query.by, limit=query.limit, visible=run_owners.visible_to(scope.owner),
        )  # fmt: skip
    except frontier_data.FrontierError as exc:
        raise _bad(str(exc), "benchmark") from None
    return frontier_data.as_json(result)


class TrajectoryQuery(Schema):
    a: int | None = Field(None, ge=1, le=MAX_ID, description="run A's id (or group_a)")
    b: int | None = Field(None, ge=1, le=MAX_ID, description="run B's id (or group_b)")
    group_a: str = Field("", description="group A, instead of a run")
    group_b: str = Field("", description="group B")
    task: str = Field(..., min_length=1, max_length=190, description="the τ² task id")
    trial: int | None = Field(None, ge=0, le=10_000, description="a trial (default: a pair where the sides disagree)")


@router.get("/trajectories", response={200: Trajectories, **ERRORS}, summary="One task's simulation on each side, turn by turn")
def trajectories(request: HttpRequest, query: Query[TrajectoryQuery]) -> dict[str, Any]:
    from ledger.reports import trajectories as trajectory_data

    scope = scope_of(request)
    if not (scope.runs and scope.traces):
        raise _denied("runs and traces")
    if scope.owner is not None:
        # Two trajectories show the messages of whichever keys' calls made them (docs/security.md).
        raise ApiError(403, "Trajectories show every key's calls: they need a key made with create_key --read-all "
                       "or a staff session.", code="permission_denied")  # fmt: skip
    for letter, run_id, group in (("a", query.a, query.group_a), ("b", query.b, query.group_b)):
        if (run_id is None) == (not group):
            raise _bad(f"Side {letter.upper()}: give `{letter}` (a run) or `group_{letter}`, one of them.", letter)
    try:
        view = trajectory_data.side_by_side(
            a=query.a, b=query.b, group_a=query.group_a, group_b=query.group_b, task=query.task, trial=query.trial
        )
    except trajectory_data.TrajectoryError as exc:
        raise _not_found(str(exc)) from None
    return trajectory_data.as_json(view)


@router.get("/experiments/{experiment_id}/progress", response={200: ExperimentProgress, **ERRORS},
            summary="A repro_tau2 experiment per arm: finished of planned, spend, pass^1 so far, infrastructure errors, ETA")  # fmt: skip
def experiment_progress(request: HttpRequest, experiment_id: int = PathParam(..., ge=1, le=MAX_ID)) -> dict[str, Any]:
    from ledger.models import Experiment
    from ledger.reports import live

    scope = scope_of(request)
    if not (scope.runs and scope.experiments):
        raise _denied("experiments")
    experiment = Experiment.objects.filter(pk=experiment_id).first()
    # Its spend per arm is its key's: another key's experiment reads as an unknown one.
    if experiment is None or (scope.owner is not None and not owns(scope.owner, experiment.key_name)):
        raise _not_found(f"No experiment #{experiment_id}.")
    return live.as_json(live.experiment_progress(experiment))
