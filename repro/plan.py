"""An experiment's plan: its arms, the τ² runs (arm × replicate) with the
leaderboard's settings, the number of simulations and the estimated cost.
`--dry-run` prints it and stops; a real run prints it, then follows it."""
from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel import money
from repro import retrieval, tau2cli
from repro.arms import Arm, parse_arms
from repro.budget import ArmEstimate, estimate_arm, has_price

if TYPE_CHECKING:
    from ledger.benchmarks import noise

# Tasks per domain in τ²'s `base` split (the board's), when τ²'s own split file cannot be read.
BASE_TASKS = {"airline": 50, "retail": 114, "telecom": 114, "banking_knowledge": 97}
BOARD_DOMAINS = ("airline", "retail", "telecom", "banking_knowledge")  # the board's four text domains
KEY_PLACEHOLDER = "<experiment key>"


@dataclass(frozen=True)
class Options:
    domain: str = "airline"
    split: str = "base"
    model: str = "openrouter/openai/gpt-5.2"
    checker: str | None = None
    user_model: str = "openrouter/openai/gpt-5.2"
    effort: str = "high"
    user_effort: str = "low"
    num_trials: int = 4
    num_tasks: int | None = None
    task_ids: tuple[str, ...] = ()
    seed: int = 300
    replicates: int = 1
    max_concurrency: int = 4
    budget_usd: str = "10"
    # Dollars per million tokens at which the budget counts calls nobody can price (None: a
    # model without a price refuses the run instead: the budget could not see its calls).
    unpriced_usd_per_mtok: str | None = None
    server_url: str = "http://127.0.0.1:3300"
    run_dir: str = "repro-runs"
    arms: str | None = None
    # Several domains in one experiment (`--domains`, `--board`): a run per domain and arm. Empty: `domain`.
    domains: tuple[str, ...] = ()
    retrieval_config: str = retrieval.DEFAULT  # banking_knowledge's --retrieval-config

    @property
    def domain_list(self) -> tuple[str, ...]:
        return self.domains or (self.domain,)

    @property
    def board(self) -> bool:
        """More than one domain: runs, groups and progress are named per domain."""
        return len(self.domain_list) > 1

    # Power and stopping (docs/comparisons.md): the pass^1 difference to detect, at this level and power;
    # with stop_when_decided the replicates end once the anytime interval decides.
    detect: float | None = None
    alpha: float = 0.05
    power: float = 0.80
    stop_when_decided: bool = False


def replicate_seed(seed: int, replicate: int) -> int:
    """The τ² --seed of a replicate: --seed, then --seed + 1, … . Each replicate
    has its own trial seeds (τ² draws them from this seed) and every arm of one
    replicate the same ones, so compare pairs the arms' trials by (task, trial
    seed) and replicates differ in seed, as the replicate statistics assume."""
    return seed + replicate - 1


@dataclass(frozen=True)
class PlannedRun:
    arm: Arm
    replicate: int  # 1-based
    name: str  # τ²'s --save-to name: experiment, (domain,) arm and replicate
    spec: tau2cli.RunSpec
    entry: str = ""  # the experiment's name for it: the arm, or `<domain>/<arm>` in a several-domain experiment

    @property
    def domain(self) -> str:
        return self.spec.domain

    @property
    def label(self) -> str:
        return self.entry or self.arm.name

    @property
    def group(self) -> str:
        return self.arm.group(self.spec.domain)


@dataclass
class Plan:
    name: str
    options: Options
    install: tau2cli.Tau2Install
    arms: list[Arm]
    runs: list[PlannedRun]
    tasks: int | None  # per run of the first domain; None when unknown
    estimates: list[ArmEstimate]  # per arm, of the first domain
    budget_nanousd: int
    warnings: list[str] = field(default_factory=list)
    fallback_per_mtok: int | None = None  # nano-dollars per million tokens, for unpriced calls
    unpriced_models: list[str] = field(default_factory=list)  # models with no price anywhere
    power: PowerPlan | None = None  # with --detect (repro.power.plan_power)
    # Per domain (the first's are `tasks` and `estimates`): tasks per run, and each arm's estimate.
    domain_tasks: dict[str, int | None] = field(default_factory=dict)
    domain_estimates: dict[str, list[ArmEstimate]] = field(default_factory=dict)
    cannot_run: str = ""  # why this τ² cannot run the plan at all ('' if it can)

    def tasks_of(self, domain: str) -> int | None:
        return self.domain_tasks.get(domain, self.tasks)

    def simulations_of(self, run: PlannedRun) -> int | None:
        tasks = self.tasks_of(run.domain)
        return None if tasks is None else tasks * self.options.num_trials

    def domain_estimate_nanousd(self, domain: str) -> int | None:
        """One domain's estimate over its arms and replicates; None when any is unknown."""
        tasks = self.tasks_of(domain)
        estimates = self.domain_estimates.get(domain, self.estimates)
        if tasks is None or any(e.per_simulation_nanousd is None for e in estimates):
            return None
        return sum(e.per_simulation_nanousd or 0 for e in estimates) * tasks * self.options.num_trials * self.options.replicates

    def _known_of(self, domain: str) -> int:
        tasks = self.tasks_of(domain) or 0
        estimates = self.domain_estimates.get(domain, self.estimates)
        return sum(e.per_simulation_nanousd or 0 for e in estimates) * tasks * self.options.num_trials * self.options.replicates

    def refusal(self) -> str:
        """Why the real run would be refused before anything runs ('' if it would not)."""
        if self.cannot_run:
            return f"{self.cannot_run}: refused, nothing ran"
        if self.unpriced_models and self.fallback_per_mtok is None:
            return (
                f"no price for {', '.join(self.unpriced_models)} (neither the price tables nor a priced call in "
                "the ledger): the budget cannot count their calls; give --unpriced-usd-per-mtok to count them at a "
                "price per million tokens: refused, nothing ran"
            )
        estimate = self.estimate_nanousd if self.estimate_nanousd is not None else self.known_estimate_nanousd
        if estimate > self.budget_nanousd:
            return (
                f"estimated cost {money.dollars(estimate)} is above --budget-usd {money.dollars(self.budget_nanousd)}: "
                "refused, nothing ran"
            )
        return ""

    @property
    def run_dir(self) -> Path:
        return Path(self.options.run_dir).resolve() / self.name

    @property
    def simulations_per_run(self) -> int | None:
        return None if self.tasks is None else self.tasks * self.options.num_trials

    @property
    def estimate_nanousd(self) -> int | None:
        """The whole experiment's estimate (every domain); None when any arm's is unknown."""
        each = [self.domain_estimate_nanousd(d) for d in self.options.domain_list]
        return None if any(e is None for e in each) else sum(e or 0 for e in each)

    @property
    def known_estimate_nanousd(self) -> int:
        """The part of the estimate that is known (the arms with a figure)."""
        return sum(self._known_of(d) for d in self.options.domain_list)

    def invocation(self, run: PlannedRun, key: str) -> tau2cli.Invocation:
        return tau2cli.invocation(self.install, run.spec, run_dir=self.run_dir, name=run.name, key=key)

    def settings(self) -> dict[str, Any]:
        """What the ledger keeps of the plan (no key)."""
        o = self.options
        return {
            "split": o.split, "model": o.model, "checker": o.checker, "user_model": o.user_model,
            "effort": o.effort, "user_effort": o.user_effort, "num_trials": o.num_trials,
            "num_tasks": o.num_tasks, "task_ids": list(o.task_ids), "seed": o.seed, "replicates": o.replicates,
            "replicate_seeds": [replicate_seed(o.seed, r) for r in range(1, o.replicates + 1)],
            "max_concurrency": o.max_concurrency, "server_url": o.server_url, "tasks": self.tasks,
            "domains": list(o.domain_list), "domain_tasks": {d: self.tasks_of(d) for d in o.domain_list},
            "retrieval_config": o.retrieval_config if any(map(retrieval.applies, o.domain_list)) else None,
            "unpriced_usd_per_mtok": o.unpriced_usd_per_mtok, "unpriced_models": self.unpriced_models,
            "tau2": f"{self.install.distribution} {self.install.version}",
            "arms": {a.name: a.agent_model for a in self.arms},
            "detect": o.detect, "alpha": o.alpha, "power": o.power, "stop_when_decided": o.stop_when_decided,
            "power_plan": None if self.power is None else self.power.as_settings(),
        }  # fmt: skip


def experiment_name(domain: str) -> str:
    return f"tau2-{domain}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(2)}"


# LiteLLM's own retry loop (τ² asks for num_retries=3) tries any failed call again at once, whatever
# Retry-After or x-should-retry say, so the daily cap's 429 would be refused four times a call. A
# policy keeps τ²'s three retries for every error but a 429: the openai SDK inside LiteLLM already
# waits out a provider's Retry-After, and the cap's refusal says not to retry until 00:00 UTC.
RETRY_POLICY = {"RateLimitErrorRetries": 0, "DefaultRetries": 3}


def llm_args(options: Options, domain: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The agent's and the user simulator's llm args, without the key.

    The agent's effort goes inside extra_body (τ² sets LiteLLM's drop_params, which silently drops a
    top-level reasoning_effort for ids LiteLLM does not know: every id through Marina); the user's
    is stated (custom llm args replace τ²'s defaults); only the agent's calls carry x-marina-eval."""
    base = options.server_url.rstrip("/") + "/v1"
    agent = {
        "api_base": base,
        "extra_body": {"reasoning_effort": options.effort},
        "extra_headers": {"x-marina-eval": f"benchmark=tau2-{domain or options.domain}; mode=measure"},
        "retry_policy": RETRY_POLICY,
    }
    user = {"api_base": base, "extra_body": {"reasoning_effort": options.user_effort}, "retry_policy": RETRY_POLICY}
    return agent, user


def with_session(agent_args: dict[str, Any], session: str) -> dict[str, Any]:
    """The agent's llm args with the run's own `x-marina-session`: the formations keep their state
    per conversation within it (passthru/formations/state.py), so two runs or two arms of one
    replicate never meet, whatever key, seed and opening they share."""
    headers = {**agent_args.get("extra_headers", {}), "x-marina-session": session}
    return {**agent_args, "extra_headers": headers}


def build(options: Options, install: tau2cli.Tau2Install, *, name: str | None = None) -> Plan:
    """The plan for these options (ValueError for an option that cannot be used)."""
    if options.replicates < 1 or options.num_trials < 1 or options.max_concurrency < 1:
        raise ValueError("--replicates, --num-trials and --max-concurrency must be at least 1")
    if options.num_tasks is not None and options.num_tasks < 1:
        raise ValueError("--num-tasks must be at least 1")
    if options.num_tasks is not None and options.task_ids:
        raise ValueError("give --num-tasks or --task-ids, not both")
    _check_power(options)
    try:
        budget = money.to_nanousd(options.budget_usd)
    except money.MoneyError:
        raise ValueError(f"--budget-usd must be a number of dollars, not {options.budget_usd!r}") from None
    if budget <= 0:
        raise ValueError("--budget-usd must be more than 0")
    fallback = None
    if options.unpriced_usd_per_mtok is not None:
        try:
            fallback = money.to_nanousd(options.unpriced_usd_per_mtok)
        except money.MoneyError:
            fallback = -1
        if fallback < 0:
            raise ValueError(
                f"--unpriced-usd-per-mtok must be a number of dollars, not {options.unpriced_usd_per_mtok!r}"
            )
    domains = options.domain_list
    unknown = [d for d in domains if d not in BASE_TASKS and d != "mock"]
    if unknown or len(set(domains)) != len(domains):
        raise ValueError(
            f"--domains takes each of {', '.join(BOARD_DOMAINS)} at most once, not {','.join(domains)}"
        )
    arms = parse_arms(options.arms, model=options.model, checker=options.checker)
    name = name or experiment_name("board" if options.board else options.domain)
    runs = []
    for replicate in range(1, options.replicates + 1):
        for domain in domains:
            agent_args, user_args = llm_args(options, domain)
            for arm in arms:
                run_name = f"{name}-{domain}-{arm.slug}-r{replicate}" if options.board else f"{name}-{arm.slug}-r{replicate}"
                runs.append(PlannedRun(
                    arm, replicate, run_name,
                    tau2cli.RunSpec(
                        domain=domain, split=options.split, agent_llm=f"openai/{arm.agent_model}",
                        user_llm=f"openai/{options.user_model}", agent_args=with_session(agent_args, run_name),
                        user_args=user_args,
                        num_trials=options.num_trials, seed=replicate_seed(options.seed, replicate),
                        max_concurrency=options.max_concurrency,
                        num_tasks=options.num_tasks, task_ids=options.task_ids,
                        retrieval_config=options.retrieval_config if retrieval.applies(domain) else None,
                        helper_base_url=options.server_url.rstrip("/") + "/v1",
                    ),
                    f"{domain}/{arm.name}" if options.board else "",
                ))  # fmt: skip
    domain_tasks = {d: _tasks(options, install, d) for d in domains}
    domain_estimates = {
        d: [
            estimate_arm(a, domain=d, model=options.model, checker=options.checker,
                         user_model=options.user_model, fallback_per_mtok=fallback)
            for a in arms
        ]
        for d in domains
    }  # fmt: skip
    first = domains[0]
    plan = Plan(name, options, install, arms, runs, domain_tasks[first], domain_estimates[first], budget)
    plan.domain_tasks, plan.domain_estimates = domain_tasks, domain_estimates
    plan.warnings = _board_warnings(options)
    plan.fallback_per_mtok = fallback
    plan.unpriced_models = _unpriced_models(options, arms)
    if any(map(retrieval.applies, domains)):
        needs = retrieval.needs(options.retrieval_config)
        plan.warnings.append(needs.sentence())
        if install.distribution == tau2cli.NVIDIA:
            plan.cannot_run = (
                f"{install.distribution} {install.version} has no banking_knowledge: install sierra's τ² "
                "(.ci/install-tau2-sierra) and set TAU2_BIN to its bin/tau2"
            )
    return plan


def _check_power(options: Options) -> None:
    if options.detect is not None and not 0 < options.detect < 1:
        raise ValueError(f"--detect is a pass^1 difference between 0 and 1 (0.03 is 3 points), not {options.detect}")
    if not 0 < options.alpha < 1 or not 0 < options.power < 1:
        raise ValueError("--alpha and --power must be between 0 and 1")
    if options.stop_when_decided:
        if options.replicates < 2:
            raise ValueError("--stop-when-decided needs --replicates 2 or more: it stops between replicates")
        if options.arms is not None and "," not in options.arms:
            raise ValueError("--stop-when-decided needs two arms or more: it decides each arm against the baseline")


def _unpriced_models(options: Options, arms: list[Arm]) -> list[str]:
    """The model ids the experiment calls that nobody can price."""
    models = [options.model, options.user_model]
    if any(a.name == "verify" for a in arms):
        models.append(options.checker or options.model)
    models += [a.agent_model for a in arms if a.agent_model.startswith("marina:")]  # crews: what they call is unknown
    return [m for m in dict.fromkeys(models) if m.startswith("marina:") or not has_price(m)]


def _tasks(options: Options, install: tau2cli.Tau2Install, domain: str | None = None) -> int | None:
    domain = domain or options.domain
    if options.task_ids:
        return len(options.task_ids)
    total = tau2cli.split_size(install, domain, options.split)
    if total is None and options.split == "base":
        total = BASE_TASKS.get(domain)
    if options.num_tasks is not None:
        return options.num_tasks if total is None else min(options.num_tasks, total)
    return total


def _board_warnings(options: Options) -> list[str]:
    out = []
    if options.split != "base":
        out.append(f"split {options.split!r}: the board uses the base split")
    if options.num_tasks is not None or options.task_ids:
        out.append("a subset of the split's tasks: not comparable to the board")
    if options.num_trials < 4:
        out.append(f"{options.num_trials} trial(s): the board wants at least 4")
    if options.effort not in ("high", "xhigh"):
        out.append(f"agent effort {options.effort!r}: board entries run high or xhigh")
    if options.user_effort != "low" or options.user_model.rsplit("/", 1)[-1] != "gpt-5.2":
        out.append("the board's user simulator is gpt-5.2 at low effort")
    return out


def _seeds(o: Options) -> str:
    if o.replicates == 1:
        return f"seed {o.seed}, 1 replicate"
    seeds = ", ".join(str(replicate_seed(o.seed, r)) for r in range(1, o.replicates + 1))
    return f"{o.replicates} replicates with seeds {seeds} (one per replicate, the same for every arm)"


def render(plan: Plan) -> list[str]:
    """The plan as printed (the key shown as a placeholder)."""
    o = plan.options
    if o.board:
        lines = _board_head(plan)
    else:
        lines = [
            f"experiment {plan.name}",
            f"  τ²: {plan.install.distribution} {plan.install.version} ({plan.install.path})",
            f"  Marina: {o.server_url} (a fresh key is made for the experiment and revoked afterwards; never printed)",
            f"  domain {o.domain}, split {o.split}, {_task_text(o, plan.tasks)}"
            f", {o.num_trials} trial(s), {_seeds(o)}, max concurrency {o.max_concurrency}",
        ]
    lines += [
        f"  agent effort {o.effort} (in extra_body), user simulator {o.user_model} at effort {o.user_effort}",
        "  τ²'s own model calls (embeddings, reranker, NL-assertion judge) go to Marina under the experiment's key "
        "(OPENAI_BASE_URL, OPENAI_API_KEY): counted in the arm's cost and the budget",
        f"  results under {plan.run_dir}",
        "  arms (the first is the baseline):",
    ]
    for domain in o.domain_list:
        for arm, est in zip(plan.arms, plan.domain_estimates.get(domain, plan.estimates)):
            per_sim = money.dollars(est.per_simulation_nanousd, unknown="unknown")
            shown = f"{domain}/{arm.name}" if o.board else arm.name
            lines.append(
                f"    {shown:<22} agent {arm.agent_model}  group {arm.group(domain)}  "
                f"{arm.submission} submission  {per_sim}/simulation ({est.source})"
            )
    notes = sorted({f"{e.source}: {e.note}" for d in o.domain_list for e in plan.domain_estimates.get(d, plan.estimates)})
    lines += [f"    ({n})" for n in notes]
    if o.board:
        total_sims = sum(plan.simulations_of(r) or 0 for r in plan.runs)
        known = all(plan.simulations_of(r) is not None for r in plan.runs)
        lines.append(f"  {len(plan.runs)} τ² run(s) = {total_sims if known else 'unknown'} simulation(s)")
    else:
        sims = plan.simulations_per_run
        total = None if sims is None else sims * len(plan.runs)
        lines.append(
            f"  {len(plan.runs)} τ² run(s) × {sims if sims is not None else 'unknown'} simulation(s) = "
            f"{total if total is not None else 'unknown'} simulation(s)"
        )
    estimate = plan.estimate_nanousd
    if estimate is None:
        lines.append(
            f"  estimated cost: unknown (known part {money.dollars(plan.known_estimate_nanousd)}); "
            f"budget {money.dollars(plan.budget_nanousd)} enforced by watching the key's spend"
        )
    else:
        lines.append(f"  estimated cost {money.dollars(estimate)}, budget {money.dollars(plan.budget_nanousd)}")
    if plan.unpriced_models:
        counted = (
            f"counted by the budget at {money.dollars(plan.fallback_per_mtok)} per million tokens"
            if plan.fallback_per_mtok is not None else "the budget cannot count their calls"
        )  # fmt: skip
        lines.append(f"  no price for {', '.join(plan.unpriced_models)}: {counted}; their cost is shown as unpriced")
    lines += [f"  note: {w}" for w in plan.warnings]
    lines.append("  commands:")
    for run in plan.runs:
        inv = plan.invocation(run, KEY_PLACEHOLDER)
        shown_env = " ".join(f"{k}={'<experiment key>' if v == KEY_PLACEHOLDER else v}" for k, v in inv.env.items())
        lines.append(f"    [{run.label} r{run.replicate} seed {run.spec.seed}] {shown_env} {tau2cli.shown(inv.argv, '')}")
        lines.append(
            f"      then import_tau2 {inv.results} --target {run.arm.agent_model} --target-kind "
            f"{run.arm.target_kind} --group {run.group} --require-clean --cost-from-spend --key <the experiment key's name>"
        )
    if len(plan.arms) > 1:
        base = plan.arms[0]
        for domain in o.domain_list:
            for arm in plan.arms[1:]:
                lines.append(f"  then compare {base.group(domain)} (A) with {arm.group(domain)} (B): this experiment's runs")
    return lines


def _task_text(o: Options, tasks: int | None) -> str:
    if o.task_ids:
        return "tasks " + " ".join(o.task_ids)
    return f"{tasks if tasks is not None else 'unknown'} task(s)"


def _board_head(plan: Plan) -> list[str]:
    """A several-domain plan's head: each domain with its tasks, simulations and estimate (its share of the budget)."""
    o = plan.options
    lines = [
        f"experiment {plan.name} (the board: {len(o.domain_list)} domains, one run per domain and arm)",
        f"  τ²: {plan.install.distribution} {plan.install.version} ({plan.install.path})",
        f"  Marina: {o.server_url} (a fresh key is made for the experiment and revoked afterwards; never printed)",
        f"  split {o.split}, {o.num_trials} trial(s), {_seeds(o)}, max concurrency {o.max_concurrency}",
        "  domains:",
    ]
    for domain in o.domain_list:
        tasks = plan.tasks_of(domain)
        sims = None if tasks is None else tasks * o.num_trials * len(plan.arms) * o.replicates
        estimate = plan.domain_estimate_nanousd(domain)
        shown = money.dollars(estimate) if estimate is not None else f"unknown (known part {money.dollars(plan._known_of(domain))})"
        extra = f", --retrieval-config {o.retrieval_config}" if retrieval.applies(domain) else ""
        lines.append(
            f"    {domain:<18} {_task_text(o, tasks)}{extra}, {sims if sims is not None else 'unknown'} simulation(s), "
            f"estimated {shown}"
        )
    return lines


@dataclass(frozen=True)
class PowerPlan:
    detect: float
    alpha: float
    power: float
    tasks: int
    trials_per_replicate: int
    arms: int
    noise: noise.Noise
    trials_needed: int  # per task, per arm
    replicates_needed: int  # of --num-trials each
    simulations: int  # every arm, at replicates_needed
    cost_nanousd: int | None  # at the plan's estimate; None when an arm's is unknown
    detects_as_given: float  # what --num-trials × --replicates detects
    budget_replicates: int | None  # replicates the budget pays (None: the cost is unknown)
    detects_at_budget: float | None
    sequential_replicates: int | None  # until the anytime interval is expected narrower than detect

    @property
    def affordable(self) -> bool:
        return self.budget_replicates is None or self.budget_replicates >= self.replicates_needed

    def as_settings(self) -> dict[str, Any]:
        """What the experiment keeps of it (its page shows the plan and the progress towards it)."""
        return {
            "detect": self.detect, "alpha": self.alpha, "power": self.power, "tasks": self.tasks,
            "trials_needed": self.trials_needed, "replicates_needed": self.replicates_needed,
            "simulations": self.simulations, "cost_nanousd": self.cost_nanousd,
            "detects_as_given": self.detects_as_given, "detects_at_budget": self.detects_at_budget,
            "sequential_replicates": self.sequential_replicates, "variance": self.noise.variance,
            "noise_source": self.noise.source, "noise_runs": self.noise.run_ids, "noise": self.noise.described,
        }  # fmt: skip
