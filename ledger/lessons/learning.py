"""Learning lessons from a τ² run: each failed simulation's conversation and
reward breakdown go to a judge model; each proposed rule is kept only if the
leak guard passes it, and merged into an existing lesson it nearly repeats.

The judge is handed in (a callable): the ledger makes no upstream calls of its
own. passthru/lessons_judge.py is the one that goes through Marina's upstream
path (passthru.calls.call_json), so every judgement is priced, counted in
spend_daily and traced like any other call."""
from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from kernel import money
from ledger.benchmarks.tau2.progress import bar
from ledger.lessons import failures, leakguard, prompts, services
from ledger.models import BenchmarkRun


@dataclass(frozen=True)
class Judged:
    """One judge call: its answer text (None when the call failed) and cost."""

    text: str | None
    cost_nanousd: int | None = None  # None: unpriced (or failed before an answer)
    error: str = ""


class StopLearning(Exception):
    """Raised by a judge when no further call can succeed (the daily spend cap)."""


Judge = Callable[[list[dict[str, str]]], Judged]


@dataclass
class Report:
    failures: int = 0  # failed simulations (evaluated, reward below 1, not a skipped sample)
    judged: int = 0
    proposed: int = 0
    kept: list[int] = field(default_factory=list)  # new lesson ids
    merged: list[int] = field(default_factory=list)  # ids of lessons a proposal was merged into
    refused: Counter[str] = field(default_factory=Counter)  # leak guard reason -> count
    unreadable: int = 0
    judge_errors: int = 0
    unpriced: int = 0
    spent_nanousd: int = 0
    budget_stop: bool = False
    stopped: str = ""  # why the judge could go no further (StopLearning)

    def lines(self) -> list[str]:
        out = [
            f"failed simulations: {self.failures}, judged: {self.judged}",
            f"proposed {self.proposed}: kept {len(self.kept)} new, merged {len(self.merged)} into existing, "
            f"refused {sum(self.refused.values())}",
        ]
        out += [f"  refused ({reason}): {n}" for reason, n in sorted(self.refused.items())]
        if self.unreadable:
            out.append(f"unreadable judge answers: {self.unreadable}")
        if self.judge_errors:
            out.append(f"failed judge calls: {self.judge_errors}")
        spent = f"learning spend: ${money.plain(self.spent_nanousd)}"
        if self.unpriced:
            spent += f" (+ {self.unpriced} unpriced call(s))"
        out.append(spent)
        if self.budget_stop:
            out.append(f"stopped: the budget was reached after {self.judged} of {self.failures} judgement(s)")
        if self.stopped:
            out.append(f"stopped after {self.judged} of {self.failures} judgement(s): {self.stopped}")
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "failures": self.failures, "judged": self.judged, "proposed": self.proposed,
            "kept": self.kept, "merged": self.merged, "refused": dict(self.refused),
            "unreadable": self.unreadable, "judge_errors": self.judge_errors, "unpriced": self.unpriced,
            "spent_usd": money.plain(self.spent_nanousd), "budget_stop": self.budget_stop, "stopped": self.stopped,
        }  # fmt: skip


class Bar:
    """`learning [#####.....] 5/12 $0.0123` on a terminal (or when asked)."""

    def __init__(self, total: int, stream: TextIO | None) -> None:
        self.total, self.stream, self.started = total, stream, time.monotonic()

    def draw(self, done: int, spent_nanousd: int) -> None:
        if self.stream is None:
            return
        self.stream.write(
            f"\rlearning {bar(done / self.total if self.total else 1.0)} {done}/{self.total} "
            f"${money.plain(spent_nanousd)} {time.monotonic() - self.started:.0f}s"
        )
        self.stream.flush()

    def close(self) -> None:
        if self.stream is not None:
            self.stream.write("\n")


def learn(
    path: str | Path,
    *,
    judge: Judge,
    judge_model: str,
    run: BenchmarkRun | None = None,
    budget_nanousd: int | None = None,
    progress: bool | None = None,
) -> Report:
    """Judge every failed simulation of the results file at `path` (until the
    budget is spent) and keep the proposals that pass the leak guard."""
    path = Path(path)
    results, failed = failures.read(path, progress=False)
    benchmark = f"tau2-{results.domain}"
    report = Report(failures=len(failed))
    stream = sys.stderr if (progress if progress is not None else sys.stderr.isatty()) else None
    bar = Bar(report.failures, stream)
    try:
        for failure in failures.failures(path, set(failed)):
            if budget_nanousd is not None and report.spent_nanousd >= budget_nanousd:
                report.budget_stop = True
                break
            _learn_one(failure, judge, judge_model, benchmark, run, path.name, report)
            bar.draw(report.judged, report.spent_nanousd)
    except StopLearning as exc:
        report.stopped = str(exc)
    finally:
        bar.close()
    return report


def _learn_one(
    failure: failures.Failure, judge: Judge, judge_model: str, benchmark: str,
    run: BenchmarkRun | None, source_name: str, report: Report,
) -> None:  # fmt: skip
    answer = judge(prompts.judge_messages(failure.messages, failure.reward_info, domain=benchmark))
    report.judged += 1
    if answer.cost_nanousd is None:
        report.unpriced += answer.text is not None
    else:
        report.spent_nanousd += answer.cost_nanousd
    if answer.text is None:
        report.judge_errors += 1
        return
    proposals = prompts.parse(answer.text)
    if proposals is None:
        report.unreadable += 1
        return
    evidence = leakguard.evidence_of(failure.messages, failure.reward_info)
    truth = leakguard.ground_truth(failure.criteria, failure.reward_info, failure.messages)
    for proposal in proposals:
        report.proposed += 1
        why = leakguard.truth_refusal(proposal.rule, truth) or leakguard.refusal(proposal.rule, evidence)
        if why:
            report.refused[why] += 1
            continue
        kept = services.keep(
            proposal.rule, domain=proposal.domain, benchmark=benchmark, item_ids=[failure.item_id],
            run_id=run.pk if run is not None else None, source_name=source_name, judge_model=judge_model,
        )  # fmt: skip
        (report.merged if kept.merged else report.kept).append(kept.lesson.pk)
