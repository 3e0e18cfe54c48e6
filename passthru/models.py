"""The /v1 surface's own tables: rate-limit buckets shared by every worker and
host (passthru/ratelimit.py), formation conversation state and crews.

They live in the passthru app, not the ledger: the ledger holds records of
what happened (spend, traces, benchmark runs) and must never import passthru,
while these are working state and configuration that only the /v1 surface
reads."""
from __future__ import annotations

from django.core.validators import RegexValidator
from django.db import models

from kernel import formations

CREW_NAME = RegexValidator(
    r"^[a-z0-9][a-z0-9._-]{0,62}$",
    "Lower-case letters, digits, '.', '_' and '-', starting with a letter or digit (at most 63).",
)


class ConversationState(models.Model):
    """One conversation's formation state (obligations ledger, argcheck memo)
    under one conversation key (passthru/formations/state.py).

    `state` holds it sealed, `{"sealed": "v1:…"}` (passthru/formations/seal.py):
    its words are not readable in the database.

    One row per history checkpoint, written once: the state after the turn
    whose history the key digests (a replay of that history keeps it as it
    is). `version` is the checkpoint's depth (the number of non-system
    messages)."""

    key = models.CharField(max_length=200, unique=True)
    state = models.JSONField(default=dict)
    version = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        db_table = "formation_state"
        verbose_name = "conversation state"

    def __str__(self) -> str:
        return self.key


class Crew(models.Model):
    """A named endpoint, served as `marina:<name>`: a model id Marina serves
    (plain, a formation or a stack) with optional defaults."""

    name = models.CharField(max_length=63, unique=True, validators=[CREW_NAME])
    description = models.TextField(blank=True)
    model_id = models.CharField(
        "model id",
        max_length=200,
        help_text=f"Any id Marina serves: openrouter/openai/gpt-5.2, {formations.VERIFY.prefix}…, "
        f"{formations.stacked('…', formations.OBLIGATIONS.name, formations.ARGCHECK.name)} (not another crew).",
    )
    system_text = models.TextField(
        "extra system text", blank=True, help_text="Sent as a system message after the caller's system messages."
    )
    reasoning_effort = models.CharField(
        max_length=16, blank=True, help_text="Sent as reasoning_effort when the caller sets no reasoning field."
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"marina:{self.name}"

    @property
    def served_as(self) -> str:
        return f"marina:{self.name}"


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


class SpendHold(models.Model):
    """A process's lease on the daily cap: room reserved for its calls in
    flight (passthru/spendcap.py). Rows live only while their process uses
    them: one not renewed for spendcap.LEASE_STALE_SECONDS (its process died)
    stops counting, and is deleted after spendcap.HOLD_TTL_SECONDS."""

    id = models.BigIntegerField(primary_key=True)  # random, chosen by the process that holds it
    day = models.DateField()  # the UTC day whose cap it counts against
    nanousd = models.BigIntegerField()  # the room reserved (left)
    created_at = models.FloatField()  # seconds since the epoch: when it was last written (sized or renewed)

    class Meta:
        db_table = "passthru_spendhold"

    def __str__(self) -> str:
        return f"{self.day}: {self.nanousd} nano-dollars"
