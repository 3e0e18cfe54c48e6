"""The passthru's one table: rate-limit buckets shared by every worker and
host (passthru/ratelimit.py). Spend and traces are the ledger's."""
from __future__ import annotations

from django.db import models


class RateBucket(models.Model):
    """One client's token bucket: `tokens` left when last taken from, at
    `updated_at` (seconds since the epoch, by the database's clock)."""

    client = models.CharField(max_length=200, primary_key=True)
    tokens = models.FloatField()
    updated_at = models.FloatField()

    class Meta:
        db_table = "passthru_ratebucket"

    def __str__(self) -> str:
        return f"{self.client}: {self.tokens:.2f}"
