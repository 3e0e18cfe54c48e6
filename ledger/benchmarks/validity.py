"""Marking a run invalid, or valid again (`benchmark_import --invalidate RUN
--reason TEXT` / `--revalidate RUN`). An invalid run stays in the ledger with
its items, is shown as invalid with the reason, and is left out of group
figures (ledger.benchmarks.compare); every change is kept in
BenchmarkRunValidity, append-only, with its reason."""
from __future__ import annotations

from django.db import transaction

from ledger.models import BenchmarkRun, BenchmarkRunValidity

MAX_REASON = 500


def _run(run_id: int) -> BenchmarkRun:
    run = BenchmarkRun.objects.select_for_update().filter(pk=run_id).first()
    if run is None:
        raise ValueError(f"no run #{run_id}")
    return run


def _reason(reason: str | None, *, required: bool) -> str:
    text = " ".join((reason or "").split())
    if required and not text:
        raise ValueError("--invalidate needs --reason TEXT: say why the run is invalid")
    if len(text) > MAX_REASON:
        raise ValueError(f"--reason must be at most {MAX_REASON} characters")
    return text


def invalidate(run_id: int, reason: str | None) -> BenchmarkRun:
    text = _reason(reason, required=True)
    with transaction.atomic():
        run = _run(run_id)
        run.status, run.invalid_reason = "invalid", text
        run.save(update_fields=["status", "invalid_reason"])
        BenchmarkRunValidity.objects.create(run=run, status="invalid", reason=text)
    return run


def revalidate(run_id: int, reason: str | None = None) -> BenchmarkRun:
    text = _reason(reason, required=False) or "revalidated"
    with transaction.atomic():
        run = _run(run_id)
        if run.status != "invalid":
            raise ValueError(f"run #{run_id} is not invalid (status {run.status})")
        run.status, run.invalid_reason = "complete", ""
        run.save(update_fields=["status", "invalid_reason"])
        BenchmarkRunValidity.objects.create(run=run, status="complete", reason=text)
    return run
