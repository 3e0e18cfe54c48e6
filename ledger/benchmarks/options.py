"""What a benchmark import is recorded under: one `ImportOptions` value, read by
the importers (ledger/benchmarks/importers.py), filled by the commands
(ledger/management/arguments.py), the upload endpoint (marina/benchmark_upload.py)
and the τ² kit (repro/runner.py). Its limits are the ledger columns' own
(`max_length`), so a value that passes is one the run's row can hold."""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from decimal import Decimal
from typing import Any

from django.db import models

from ledger.benchmarks import checks
from ledger.models import BenchmarkRun

TARGET_KINDS = ("model", "crew")


def max_length(field: str, model: type[models.Model] = BenchmarkRun) -> int:
    """The column's max_length: what the ledger can hold, stated once, in the model."""
    length = model._meta.get_field(field).max_length  # type: ignore[union-attr]
    assert isinstance(length, int), f"{model.__name__}.{field} has no max_length"
    return length


# Group keys are short labels (as the original Marina's): letters, digits and : . _ @ / -
_GROUP = re.compile(rf"^[A-Za-z0-9:._@/-]{{1,{max_length('group')}}}$")


@dataclass(frozen=True)
class ImportOptions:
    """The options of one import (the commands' flags of the same names)."""

    target: str
    target_kind: str = "model"
    group: str | None = None
    label: str | None = None
    cost_usd: float | Decimal | None = None
    cost_from_spend: bool = False
    dry_run: bool = False
    judge: str | None = None
    replicate_of: int | None = None
    # The Marina keys the run used (`--key`): its items link only to their traces
    # (an operator key's callers `NAME/…` with it); None: every key's traces.
    keys: tuple[str, ...] | None = None
    # The Marina key filing the run (an upload); "" for the command line.
    owner: str = ""

    @classmethod
    def from_command(cls, options: Mapping[str, Any]) -> ImportOptions:
        """From a command's parsed options (ledger/management/arguments.py adds them)."""
        given = {f.name: options[f.name] for f in fields(cls) if f.name in options}  # no --owner: uploads only
        given["keys"] = tuple(given["keys"]) if given["keys"] else None  # --key is repeatable: a list or None
        return cls(**given)

    def checked(self) -> ImportOptions:
        """These options with the group to record resolved (--group, or
        --replicate-of's run's group); ValueError for a bad one."""
        judge, target, label, group = self.judge, self.target, self.label, self.group
        if judge is not None and not 0 < len(judge) <= max_length("judge"):
            raise ValueError(f"--judge must be 1 to {max_length('judge')} characters")
        if self.replicate_of is not None:
            if group is not None:
                raise ValueError("give --group or --replicate-of, not both")
            group = replicate_group(self.replicate_of)
        if self.target_kind not in TARGET_KINDS:
            raise ValueError(f"--target-kind must be one of {', '.join(TARGET_KINDS)}, not {self.target_kind!r}")
        if not target or len(target) > max_length("target"):
            raise ValueError(f"--target must be a model id or crew id of 1 to {max_length('target')} characters")
        if group is not None and (not _GROUP.match(group) or group.startswith("auto:")):
            raise ValueError(
                f"--group must be 1 to {max_length('group')} letters, digits or : . _ @ / - (not starting auto:)"
            )
        if label is not None and len(label) > max_length("label"):
            raise ValueError(f"--label must be at most {max_length('label')} characters")
        if self.cost_usd is not None:
            if self.cost_from_spend:
                raise ValueError("give --cost-usd or --cost-from-spend, not both")
            if not math.isfinite(float(self.cost_usd)) or not 0 <= self.cost_usd <= checks.MAX_RUN_COST_USD:
                raise ValueError(f"--cost-usd must be a number of dollars from 0 to {checks.MAX_RUN_COST_USD:,.0f}")
        return replace(self, group=group)


def replicate_group(run_id: int) -> str:
    """The group a replicate of run #run_id joins: that run's group, or, when it
    has none, `run-<id>` (the run is put in it when the replicate is recorded)."""
    run = BenchmarkRun.objects.filter(pk=run_id).first()
    if run is None:
        raise ValueError(f"--replicate-of: no run #{run_id}")
    return run.group or f"run-{run.pk}"
