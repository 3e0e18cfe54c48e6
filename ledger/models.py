"""The ledger's tables. Money is integer nano-dollars (1e-9 USD): exact on
SQLite and PostgreSQL alike, where SQLite's DECIMAL sums drift like floats."""
from __future__ import annotations

from decimal import Decimal

from django.db import models

NANO = Decimal("1e-9")


def usd(nanousd: int | None) -> Decimal | None:
    return None if nanousd is None else Decimal(nanousd) * NANO


class SpendDaily(models.Model):
    """Spend per UTC day, key, requested model, provider and upstream model.

    Rows are only ever incremented with one atomic upsert
    (ledger.services.record_request), so concurrent workers and hosts sharing
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
        return Decimal(self.cost_nanousd) * NANO


class Trace(models.Model):
    """One /v1 request. `request_id` is the x-request-id the caller saw."""

    request_id = models.CharField(max_length=64, db_index=True)
    started_at = models.DateTimeField(db_index=True)
    duration_ms = models.FloatField()
    overhead_ms = models.FloatField(null=True)
    method = models.CharField(max_length=8, default="POST")
    path = models.CharField(max_length=100)
    key_name = models.CharField(max_length=64, blank=True)
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

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return self.request_id

    @property
    def cost_usd(self) -> Decimal | None:
        return usd(self.cost_nanousd)


class Span(models.Model):
    """One step of a request: an upstream call, or a formation step that
    groups calls. `parent_seq` names the parent span's `seq` in the same trace."""

    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="spans")
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

    def __str__(self) -> str:
        return f"{self.trace_id}.{self.seq} {self.name}"

    @property
    def cost_usd(self) -> Decimal | None:
        return usd(self.cost_nanousd)
