"""The Lesson table. Imported by ledger/models.py, so Django sees it as the
ledger app's model; the full-text index beside it is made by migration 0008
(SQLite: an FTS5 table kept by triggers; PostgreSQL: a generated tsvector
column with a GIN index), see ledger/lessons/search.py."""
from __future__ import annotations

from django.db import models

MAX_RULE_CHARS = 300


class Lesson(models.Model):
    """A short general rule learned from past outcomes. Never holds conversation
    text: the leak guard (ledger/lessons/leakguard.py) refused any rule quoting one."""

    class Trust(models.TextChoices):
        UNVERIFIED = "unverified"
        TRUSTED = "trusted"

    class Domain(models.TextChoices):
        TOOLS = "tools"  # how to use the tools (arguments, order, confirmations)
        CODE = "code"  # policy and procedure the agent must follow
        META = "meta"
        BENCHMARK = "benchmark"

    rule = models.CharField(max_length=MAX_RULE_CHARS)
    domain = models.CharField(max_length=16, choices=Domain.choices, default=Domain.TOOLS, db_index=True)
    trust = models.CharField(max_length=16, choices=Trust.choices, default=Trust.UNVERIFIED)
    # Provenance: which benchmark, run and items it was learned from, and by which judge.
    benchmark = models.CharField(max_length=64, blank=True, db_index=True)  # tau2-<domain>
    run = models.ForeignKey(
        "ledger.BenchmarkRun", null=True, blank=True, on_delete=models.SET_NULL, related_name="lessons"
    )
    item_ids = models.JSONField(default=list, blank=True)  # ["<task>#<trial>", ...]
    source_name = models.CharField(max_length=255, blank=True)  # the results file's name
    judge_model = models.CharField(max_length=200, blank=True)
    support = models.PositiveIntegerField(default=1)  # proposals merged into it (near-duplicates)
    retired = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    promoted_at = models.DateTimeField(null=True, blank=True)
    retired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self) -> str:
        return f"L{self.pk} {self.rule[:60]}"
