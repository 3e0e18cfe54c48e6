"""repro_tau2 with sierra-research/tau2-bench's own τ² (.ci/install-tau2-sierra installs it where its
source is; without it these tests skip and say why; MARINA_TAU2_SIERRA_BIN names another one). The
kit must tell it apart, give it the key in its llm args, find `results.json` under `--save-to`,
import the clean arm and refuse the arm whose calls fail as `infrastructure_error` simulations; and
run the board: a run per domain and arm, banking_knowledge with its retrieval config, τ²'s own
embedding calls through Marina under the experiment's key and in the arm's cost."""
from __future__ import annotations

import json
import re

import pytest

from tests.e2e import test_repro_tau2 as kit
from tests.e2e.tau2_cli import require_sierra
from tests.e2e.tau2_oracle import start_oracle

pytestmark = [pytest.mark.e2e, pytest.mark.tau2]
SIERRA = require_sierra()


@pytest.fixture(autouse=True)
def sierra_tau2(monkeypatch):
    monkeypatch.setattr(kit, "TAU2", SIERRA.tau2)
    monkeypatch.setenv("TAU2_DATA_DIR", str(SIERRA.data_dir))  # a non-editable install finds its data only so


def test_sierra_tau2_runs_imports_and_refuses_infrastructure_errors(servers, tmp_path):
    oracle, url = start_oracle(0, tasks_file=SIERRA.tasks_file("airline"), spoil_rate=0.0, spoil_seed=0)
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


def test_the_board_runs_each_domain_with_taus_own_calls_metered(servers, tmp_path):
    """telecom and banking_knowledge (openai_embeddings) in one experiment, one task each."""
    files = [SIERRA.tasks_file("telecom"), SIERRA.tasks_file("banking_knowledge")]
    # `--num-tasks 1` runs each domain's first task (telecom's first in tasks.json of its base split):
    # the scripted user knows only those two, so it tells them apart (telecom's tasks share scenarios).
    base = set(json.loads((SIERRA.tasks_file("telecom").parent / "split_tasks.json").read_text())["base"])
    telecom = next(t["id"] for t in json.loads(SIERRA.tasks_file("telecom").read_text()) if t["id"] in base)
    first = [telecom, json.loads(SIERRA.tasks_file("banking_knowledge").read_text())[0]["id"]]
    oracle, url = start_oracle(0, tasks_file=files, spoil_rate=0.0, task_ids=first)
    try:
        server = servers.start(MARINA_OPENROUTER_BASE_URL=url)
        done = kit.repro(server, tmp_path, "--arm", "single", "--domains", "telecom,banking_knowledge",
                         "--retrieval-config", "openai_embeddings", "--num-tasks", "1", "--num-trials", "1",
                         "--budget-usd", "5")  # fmt: skip
        embedded = sum(1 for b in oracle.oracle.received() if "input" in b)
    finally:
        oracle.shutdown()
        oracle.server_close()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "(the board: 2 domains, one run per domain and arm)" in done.stdout
    assert re.search(r"\[telecom/single r1\] imported: run #\d+ in group tau2-telecom-single: 1 simulation\(s\), pass\^1 1\.000", done.stdout)
    assert re.search(r"\[banking_knowledge/single r1\] imported: run #\d+ in group tau2-banking_knowledge-single: "
                     r"1 simulation\(s\), pass\^1 1\.000", done.stdout)  # fmt: skip
    assert "by domain: telecom $" in done.stderr
    ledger = server.ledger
    runs = dict(ledger.rows("SELECT domain, retrieval_config FROM ledger_benchmarkrun"))
    assert runs == {"telecom": "", "banking_knowledge": "openai_embeddings"}
    # τ²'s own embedding calls went through Marina under the experiment's key, and into banking's cost.
    (key,) = [name for name, _ in kit.experiment_keys(server)]
    traced, cost = ledger.rows(
        "SELECT COUNT(*), SUM(cost_nanousd) FROM ledger_trace WHERE requested_model = 'text-embedding-3-large' "
        "AND key_name = %s", (key,)
    )[0]  # fmt: skip
    assert traced == embedded > 0 and cost > 0
    banking_cost, linked = ledger.rows(
        "SELECT r.cost_nanousd, SUM(i.trace_cost_nanousd) FROM ledger_benchmarkrun r JOIN ledger_benchmarkitem i "
        "ON i.run_id = r.id WHERE r.domain = 'banking_knowledge' GROUP BY r.cost_nanousd"
    )[0]  # fmt: skip
    assert int(banking_cost) == int(linked) + int(cost)
    settings = json.loads(ledger.one("SELECT settings FROM ledger_experiment"))
    assert (settings["domains"], settings["retrieval_config"]) == (["telecom", "banking_knowledge"], "openai_embeddings")
    kit.assert_no_secret(server, done.stdout, done.stderr)


def test_the_daily_caps_refusal_is_tried_once_per_call(servers, tmp_path):
    """Sierra's τ² retries a failed simulation itself (`--max-retries`, 3): each of its tries is a
    call refused once, not four times."""
    oracle, url = start_oracle(0, tasks_file=SIERRA.tasks_file("airline"), spoil_rate=0.0, spoil_seed=0)
    try:
        server = servers.start(MARINA_OPENROUTER_BASE_URL=url, MARINA_DAILY_SPEND_CAP_USD="0.000001")
        done = kit.repro(server, tmp_path, "--arm", "single", "--task-ids", "7", "--num-trials", "1")
    finally:
        oracle.shutdown()
        oracle.server_close()
    kit.assert_each_refusal_tried_once(server, tmp_path, done)
