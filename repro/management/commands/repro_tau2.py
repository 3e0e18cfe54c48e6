"""manage.py repro_tau2: an arm-by-arm τ² experiment in one command (docs/repro.md)."""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.utils import OperationalError, ProgrammingError

from kernel import money
from ledger.benchmarks import experiments
from repro import doctor, retrieval, submission, tau2cli
from repro.arms import ArmError
from repro.plan import BOARD_DOMAINS, Options, build, render
from repro.power import plan_power
from repro.power import render as render_power
from repro.runner import ReproError, Runner


def unmigrated(exc: Exception) -> bool:
    """A missing table (SQLite: "no such table"; PostgreSQL: "relation … does not exist")."""
    text = str(exc)
    return "no such table" in text or ("relation" in text and "does not exist" in text)


def _domains(o: dict[str, Any]) -> tuple[str, ...]:
    """--board, else --domains (comma-separated), else () for --domain alone."""
    if o["board"] and o["domains"]:
        raise CommandError("give --board or --domains, not both", returncode=2)
    if o["board"]:
        return BOARD_DOMAINS
    if o["domains"]:
        return tuple(d.strip() for d in o["domains"].split(",") if d.strip())
    return ()


class Command(BaseCommand):
    help = (
        "Run τ² once per arm and replicate through a running Marina with the leaderboard's settings, import "
        "each run (--require-clean) into group tau2-<domain>-<arm> and compare every arm with the first. "
        "`repro_tau2 doctor` checks the prerequisites; `repro_tau2 list` shows past experiments."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", nargs="?", default="run", choices=("run", "doctor", "list"))
        d = Options()
        parser.add_argument(
            "--arm", dest="arms", metavar="A,B,…",
            help="arms in order, the first is the baseline (default single,verify): single, verify, obligations, "
            "argcheck, obligations+argcheck, lessons, marina:<crew>",
        )  # fmt: skip
        parser.add_argument("--domain", default=d.domain)
        parser.add_argument(
            "--domains", metavar="D,D,…",
            help="several domains in one experiment, a run per domain and arm (e.g. airline,retail,telecom,banking_knowledge)",
        )  # fmt: skip
        parser.add_argument("--board", action="store_true",
                            help=f"the board's four domains: --domains {','.join(BOARD_DOMAINS)}")  # fmt: skip
        parser.add_argument(
            "--retrieval-config", default=d.retrieval_config, metavar="CONFIG",
            help=f"banking_knowledge's knowledge-base search (default {retrieval.DEFAULT}, τ²'s own; "
            f"{', '.join(retrieval.NOTHING_MORE)} need nothing beyond τ²; see `doctor`)",
        )  # fmt: skip
        parser.add_argument("--split", default=d.split, help="τ²'s task split (default base, the board's)")
        parser.add_argument("--model", default=d.model, help=f"the answer model (default {d.model})")
        parser.add_argument("--checker", help="verify's checker (default: the server's, else the model)")
        parser.add_argument("--user-model", default=d.user_model, help=f"user simulator (default {d.user_model})")
        parser.add_argument("--effort", default=d.effort, help="agent reasoning effort (default high)")
        parser.add_argument("--user-effort", default=d.user_effort, help="user simulator effort (default low)")
        parser.add_argument("--num-trials", type=int, default=d.num_trials, help="τ²'s trials per task (default 4)")
        tasks = parser.add_mutually_exclusive_group()
        tasks.add_argument("--num-tasks", type=int)
        tasks.add_argument("--task-ids", nargs="+", default=[])
        parser.add_argument("--seed", type=int, default=d.seed, help=f"τ²'s seed (default {d.seed})")
        parser.add_argument("--replicates", type=int, default=d.replicates, help="τ² runs per arm (default 1)")
        parser.add_argument("--max-concurrency", type=int, default=d.max_concurrency)
        parser.add_argument("--budget-usd", default=d.budget_usd, help=f"dollars (default {d.budget_usd})")
        parser.add_argument(
            "--unpriced-usd-per-mtok", metavar="DOLLARS",
            help="count calls nobody can price at this many dollars per million tokens in the budget (without it, "
            "a model with no price refuses the run); their cost is still shown as unpriced",
        )  # fmt: skip
        parser.add_argument(
            "--detect", type=float, metavar="DIFF",
            help="a pass^1 difference to detect (0.03: 3 points): prints the trials, simulations and dollars for it; "
            "with --stop-when-decided, the interval width at which to stop",
        )  # fmt: skip
        parser.add_argument("--alpha", type=float, default=d.alpha, help=f"the test's level (default {d.alpha})")
        parser.add_argument("--power", type=float, default=d.power, help=f"the power to plan for (default {d.power})")
        parser.add_argument(
            "--stop-when-decided", action="store_true",
            help="stop adding replicates once the anytime-valid interval for each arm's difference excludes 0 "
            "(or is narrower than --detect)",
        )  # fmt: skip
        parser.add_argument("--dry-run", action="store_true", help="print the plan and stop")
        parser.add_argument("--server-url", default=d.server_url, help=f"the Marina to run through ({d.server_url})")
        parser.add_argument("--run-dir", default=d.run_dir, help=f"where τ²'s results go (default ./{d.run_dir})")
        parser.add_argument("--poll-seconds", type=float, default=1.0, help="how often spend and progress are read")
        parser.add_argument(
            "--submission", metavar="DIR",
            help="afterwards, a leaderboard submission per arm in DIR/<arm> (as manage.py tau2_submission makes it)",
        )  # fmt: skip
        parser.add_argument("--allow-incomplete", action="store_true",
                            help="with --submission: prepare it even when a check FAILs")  # fmt: skip

    def handle(self, *args: Any, **o: Any) -> None:
        try:
            return self._handle(**o)
        except (OperationalError, ProgrammingError) as exc:
            if not unmigrated(exc):
                raise
            raise CommandError(
                f"the database has not been migrated ({str(exc).splitlines()[0]}): run manage.py migrate", returncode=1
            ) from None

    def _handle(self, **o: Any) -> None:
        if o["action"] == "doctor":
            return self._doctor(o["server_url"], o["retrieval_config"])
        if o["action"] == "list":
            return self._list()
        options = Options(
            domain=o["domain"], split=o["split"], model=o["model"], checker=o["checker"], user_model=o["user_model"],
            effort=o["effort"], user_effort=o["user_effort"], num_trials=o["num_trials"], num_tasks=o["num_tasks"],
            task_ids=tuple(o["task_ids"]), seed=o["seed"], replicates=o["replicates"],
            max_concurrency=o["max_concurrency"], budget_usd=o["budget_usd"], server_url=o["server_url"],
            run_dir=o["run_dir"], arms=o["arms"], unpriced_usd_per_mtok=o["unpriced_usd_per_mtok"],
            detect=o["detect"], alpha=o["alpha"], power=o["power"], stop_when_decided=o["stop_when_decided"],
            domains=_domains(o), retrieval_config=o["retrieval_config"],
        )  # fmt: skip
        try:
            install = tau2cli.detect()
            plan = build(options, install)
            if options.detect is not None:
                plan.power = plan_power(plan, options.detect, alpha=options.alpha, level=options.power)
        except (tau2cli.Tau2NotFound, ArmError, ValueError) as exc:
            raise CommandError(str(exc), returncode=2 if isinstance(exc, (ArmError, ValueError)) else 1) from None
        self.stdout.write("\n".join(render(plan)))
        if plan.power is not None:
            self.stdout.write("\n".join(render_power(plan.power, plan)))
        refused = plan.refusal()
        if o["dry_run"]:
            if plan.cannot_run:
                self.stdout.write(f"dry run: the real run would be refused: {plan.cannot_run}")
            elif refused:
                self.stdout.write(f"dry run: the real run would be refused by its own budget: {refused.rsplit(':', 1)[0]}")
            return None
        if refused:
            raise CommandError(refused, returncode=1)
        runner = Runner(plan, say=self.stdout.write, progress=self.stderr.write, poll_seconds=o["poll_seconds"])
        try:
            report = runner.run()
        except ReproError as exc:
            raise CommandError(str(exc), returncode=1) from None
        for text in report.comparisons:
            self.stdout.write(text, ending="" if text.endswith("\n") else "\n")
        code = self._submissions(plan, report, o) if o["submission"] else 0
        if report.exit_code or code:
            raise CommandError(f"experiment {plan.name}: {report.experiment.status}"
                               + ("; a submission was refused or not valid" if code else ""),
                               returncode=report.exit_code or code)  # fmt: skip
        return None

    def _submissions(self, plan: Any, report: Any, o: dict[str, Any]) -> int:
        """One submission per arm; the worst of their exit codes (tau2_submission's)."""
        worst = 0
        for made in submission.for_experiment(plan, report, o["submission"], allow_incomplete=o["allow_incomplete"]):
            title = f"== submission: {made.arm} -> {made.out}" + (f" ({made.detail})" if made.detail else "") + " =="
            self.stdout.write(title)
            if made.result is None:
                self.stdout.write(f"not made: {made.detail}")
                worst = max(worst, 1)
                continue
            for line in submission.render(made.result):
                self.stdout.write(line)
            code = submission.exit_code(made.result, allow_incomplete=o["allow_incomplete"])
            if code:
                self.stdout.write(f"not made: {made.result.stopped}" if made.result.stopped else "not valid")
            worst = max(worst, code)
        return worst

    def _doctor(self, server_url: str, retrieval_config: str = retrieval.DEFAULT) -> None:
        found = doctor.checks(server_url, retrieval_config)
        for check in found:
            self.stdout.write(f"{check.status:<4} {check.name}: {check.detail}")
        if any(c.status == doctor.FAIL for c in found):
            raise CommandError("some prerequisites are missing (FAIL above)", returncode=1)

    def _list(self) -> None:
        listed = experiments.recent()
        if not listed:
            self.stdout.write("no experiments yet")
            return
        for row in listed:
            e = row.experiment
            self.stdout.write(
                f"{e.started_at:%Y-%m-%d %H:%M} {e.name}  {e.status}  arms {','.join(e.arms)}  "
                f"{row.imported}/{row.planned} run(s) imported  spent {row.spent.shown()}"
                + (f" ({row.spent.basis_note})" if row.spent.basis_note else "") + f"  budget {money.dollars(e.budget_nanousd)}"
                + (f"  ({e.note})" if e.note else "")
            )
