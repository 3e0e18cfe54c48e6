"""An experiment while it runs (repro/progress.py, ledger/reports/live.py): τ²'s
incrementally saved results read into the figures so far, per arm: finished of
planned, pass^1 with its interval, infrastructure errors with the INVALID
warning, spend against the budget, an ETA; the page, `/api/experiments/{id}/progress`
and the command line's bars show the same figures."""
from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ledger.benchmarks import experiments
from ledger.benchmarks.metrics import summarize
from ledger.benchmarks.tau2.results import read_results
from ledger.reports import live
from ledger.spend.records import SpanRecord, TraceRecord
from ledger.spend.services import record_requests
from repro.progress import Tracker, bars
from tests.ledger.builders import make_run
from tests.ledger.tau2files import results
from tests.marina.test_read_api import get, staff_client

NANO = 10**9


def test_the_tracker_reads_what_tau2_saved_so_far(tmp_path: Path) -> None:
    source = results("airline-infra-errors")
    tracker = Tracker(planned=40)
    progress = tracker.read(source)
    assert progress is not None
    whole = read_results(source)
    assert progress["infra_errors"] == whole.infra_errors == 2
    assert progress["evaluated"] == whole.summary().simulations
    assert progress["passed"] == sum(1 for s in whole.simulations if s.correct)
    assert sum(n for _, n in progress["per_task"].values()) == progress["evaluated"]
    assert progress["planned"] == 40 and progress["first_at"] <= progress["updated_at"]
    half = tmp_path / "results.json"
    half.write_bytes(source.read_bytes()[: source.stat().st_size // 2])  # caught mid-rewrite
    assert tracker.read(half) is None and tracker.read(tmp_path / "missing.json") is None
    # the runner's call: parsed once per simulation count, a half-written file changes nothing
    assert tracker.update(source, 38) is not None and tracker.update(source, 38) is None
    assert tracker.update(half, 39) is None and tracker.update(source, 0) is None


def _experiment(now: datetime) -> experiments.Experiment:
    experiment = experiments.open_experiment(
        name="tau2-airline-live", domain="airline", arms=["single", "verify"], key_name="repro-live",
        settings={"tasks": 5, "num_trials": 2, "split": "base", "seed": 300}, budget_nanousd=10 * NANO,
        estimate_nanousd=8 * NANO,
        runs=[experiments.PlannedRun("single", 1, "m/a", "g-single"), experiments.PlannedRun("verify", 1, "marina/verify:m/a", "g-verify")],
    )  # fmt: skip
    done = make_run({f"{t}#{n}": 1.0 if (t + n) % 3 else 0.0 for t in range(1, 6) for n in range(2)}, group="g-single")
    experiments.record_run(experiment, "single", 1, outcome=experiments.Outcome.IMPORTED, run=done, simulations=10,
                           spent_nanousd=2 * NANO)  # fmt: skip
    progress = {"evaluated": 3, "passed": 2, "infra_errors": 1, "per_task": {"1": [1, 2], "2": [1, 1]}, "planned": 10,
                "first_at": (now - timedelta(minutes=8)).isoformat(), "updated_at": now.isoformat()}  # fmt: skip
    experiments.record_run(experiment, "verify", 1, outcome=experiments.Outcome.PENDING, detail="running",
                           simulations=4, spent_nanousd=NANO, progress=progress)  # fmt: skip
    experiments.note_spend(experiment, 3 * NANO)
    return experiment


def test_progress_per_arm_page_api_and_bars_agree(db) -> None:
    now = datetime.now(UTC)
    experiment = _experiment(now)
    # two agent calls of one conversation and one of another, under the experiment's key
    record_requests([
        TraceRecord(request_id=f"live-{n}", started_at=now + timedelta(seconds=1), path="/v1/chat/completions", key_name="repro-live",
                    requested_model="marina/verify:m/a", conv_seed=300, conv_opening=opening,
                    spans=[SpanRecord(seq=0, name="upstream", started_at=now, provider="p", upstream_model="m/a", cost_nanousd=1)])
        for n, opening in enumerate(["aaaa", "aaaa", "bbbb"])
    ])  # fmt: skip
    progress = live.experiment_progress(experiment)
    single, verify = progress.arms
    assert (single.finished, single.planned, single.running, single.infra_errors) == (10, 10, False, 0)
    assert single.pass1 == pytest.approx(summarize(experiment.runs.get(arm="single").run.items.all()).pass_hat_k[0])
    assert (verify.finished, verify.planned, verify.evaluated, verify.passed, verify.infra_errors) == (4, 10, 3, 2, 1)
    assert verify.started == 2 and verify.running
    assert verify.pass1 == pytest.approx((0.5 + 1.0) / 2)
    assert verify.eta_seconds == pytest.approx(6 * 120)  # 4 done in 8 minutes: 6 left at 2 minutes each
    assert progress.eta_seconds == pytest.approx(6 * 120)
    assert "this run will be INVALID; fix the cause" in verify.warning

    lines = bars(experiment, experiment.budget_nanousd)
    assert lines[1].startswith("verify") and "4/10 simulations" in lines[1] and "infra errors 1" in lines[1]
    assert "spent $1.00000000 of $10.00000000" in lines[1] and "pass^1 0.750" in lines[1]
    assert "WARNING: this run will be INVALID; fix the cause" in lines[1] and "ETA 12 min" in lines[1]
    assert "WARNING" not in lines[0]

    client = staff_client()
    status, api = get(client, f"/api/experiments/{experiment.pk}/progress")
    assert status == 200 and [a["arm"] for a in api["arms"]] == ["single", "verify"]
    assert api["arms"][1]["finished"] == 4 and api["arms"][1]["infra_errors"] == 1 and api["arms"][1]["started_in_traces"] == 2
    html = client.get(f"/reports/experiments/{experiment.pk}/").content.decode()
    assert '<meta http-equiv="refresh" content="30">' in html
    assert "Arm verify: 1 infrastructure error(s) so far: this run will be INVALID; fix the cause." in html
    for arm in api["arms"]:
        row = html.split(f'<tr data-arm="{arm["arm"]}">')[1].split("</tr>")[0]
        assert re.search(rf'data-figure="finished">{arm["finished"]} / {arm["planned"]}<', row)
        assert f'data-figure="pass1">{arm["pass_hat_1"]:.3f}<' in row
        assert f'data-figure="infra">{arm["infra_errors"]}<' in row
        assert f'data-figure="arm-spent"><span class="money" title="${arm["spent_usd"]} exactly">' in row  # cents shown
    assert get(client, "/api/experiments/999/progress")[0] == 404
    # once it ends: no refresh, no ETA
    experiments.close_experiment(experiment, spent_nanousd=3 * NANO)
    html = client.get(f"/reports/experiments/{experiment.pk}/").content.decode()
    assert 'http-equiv="refresh"' not in html and live.experiment_progress(experiment).eta_seconds is None


def _unpriced_calls(key_name: str, now: datetime, n: int, **fields: object) -> None:
    """n calls under the key that nobody priced (the provider reported no cost), 1,000 tokens each."""
    record_requests([
        TraceRecord(request_id=f"unpriced-{key_name}-{i}", started_at=now + timedelta(seconds=1), path="/v1/chat/completions",
                    key_name=key_name, requested_model="m/a", conv_seed=300, conv_opening=f"o{i}", **fields,  # type: ignore[arg-type]
                    spans=[SpanRecord(seq=0, name="upstream", started_at=now, provider="p", upstream_model="m/a",
                                      prompt_tokens=900, completion_tokens=100, cost_nanousd=None)])
        for i in range(n)
    ])  # fmt: skip


@pytest.mark.parametrize("fallback", ["0.5", None], ids=["fallback", "no-fallback"])
def test_unpriced_spend_never_reads_as_a_dollar_figure(db, fallback) -> None:
    # Once: "spent $0.00000000 of $5.00000000" in the list, 0.00000000 on the pages and the API.
    from io import StringIO

    from django.core.management import call_command

    now = datetime.now(UTC)
    experiment = experiments.open_experiment(
        name="tau2-airline-unpriced", domain="airline", arms=["single"], key_name="repro-unpriced",
        settings={"tasks": 2, "num_trials": 1, "split": "base", "seed": 300, "unpriced_usd_per_mtok": fallback},
        budget_nanousd=5 * NANO, estimate_nanousd=NANO, runs=[experiments.PlannedRun("single", 1, "m/a", "g-single")],
    )  # fmt: skip
    _unpriced_calls("repro-unpriced", now, 36)
    counted = 36 * 1000 * NANO // 2 // 1_000_000 if fallback else 0  # 36,000 tokens at $0.5 per million
    experiments.record_run(experiment, "single", 1, outcome=experiments.Outcome.PENDING, detail="running",
                           simulations=1, spent_nanousd=counted)  # fmt: skip
    experiments.close_experiment(experiment, spent_nanousd=counted)

    out = StringIO()
    call_command("repro_tau2", "list", stdout=out)
    listed = out.getvalue()
    client = staff_client()
    status, api = get(client, f"/api/experiments/{experiment.pk}/progress")
    page = client.get(f"/reports/experiments/{experiment.pk}/").content.decode()
    rows = client.get("/reports/experiments/").content.decode()
    assert status == 200 and api["unpriced_calls"] == 36
    if fallback:
        shown = "$0.01800000 at the fallback price"  # the command line's exact figure; a page writes $0.0180
        assert f"spent {shown} (36 unpriced call(s) counted at the fallback price of $0.5 per million tokens " \
               "(--unpriced-usd-per-mtok): a budget estimate, not a bill)  budget $5.00000000" in listed
        assert (api["spent_usd"], api["spent_basis"], api["fallback_usd_per_mtok"]) == ("0.01800000", "fallback price", "0.5")
        assert api["arms"][0]["spent_basis"] == "fallback price"
        assert re.search(r'data-figure="spent" data-basis="fallback price"[^>]*>\$0\.0180 at the fallback price<', rows)
        assert re.search(r'data-figure="arm-spent"><span class="money" title="\$0\.01800000 exactly">\$0\.0180</span> at the fallback price<', page)
        assert "not a bill" in page
    else:
        assert "spent unpriced (36 calls) (36 call(s) nobody could price are not in it)  budget $5.00000000" in listed
        assert (api["spent_usd"], api["spent_basis"]) == (None, "unknown")
        assert re.search(r'data-figure="arm-spent"><span class="money unknown"[^>]*>— <span class="why">unpriced</span>', page)
        assert re.search(r'data-figure="spent" data-basis="unknown"[^>]*>unpriced \(36 calls\)<', rows)
    # One figure for the experiment, with its basis: the page no longer shows a second total.
    assert len(re.findall(r'data-figure="spent"', page)) == 1 and "Spent $0.00000000 of a budget" not in page
    assert "$0.00000000" not in listed


def test_started_counts_the_agents_conversations_when_the_user_shares_its_model(db) -> None:
    # Once 401 for 200 simulations: the user simulator's calls (same model id) were counted too.
    now = datetime.now(UTC)
    experiment = experiments.open_experiment(
        name="tau2-airline-shared", domain="airline", arms=["single"], key_name="repro-shared",
        settings={"tasks": 2, "num_trials": 2, "split": "base", "seed": 300}, budget_nanousd=5 * NANO,
        estimate_nanousd=NANO, runs=[experiments.PlannedRun("single", 1, "m/a", "g-single")],
    )  # fmt: skip
    agent, user = [], []
    for seed in (300, 301):  # two trials of one task: one opening, two seeds
        for turn in range(3):
            agent.append(TraceRecord(request_id=f"a-{seed}-{turn}", started_at=now + timedelta(seconds=1), path="/v1/chat/completions",
                                     key_name="repro-shared", requested_model="m/a", conv_seed=seed, conv_opening="agent-open",
                                     session=live.run_session(experiment, "single", 1)))  # fmt: skip
            user.append(TraceRecord(request_id=f"u-{seed}-{turn}", started_at=now + timedelta(seconds=1), path="/v1/chat/completions",
                                    key_name="repro-shared", requested_model="m/a", conv_seed=seed, conv_opening="user-open"))  # fmt: skip
    record_requests(agent + user)
    assert live.run_session(experiment, "single", 1) == "tau2-airline-shared-single-r1"
    (arm,) = live.experiment_progress(experiment).arms
    assert arm.started == 2


def test_the_eta_counts_from_taus_start_not_from_the_first_saved_simulation(db) -> None:
    # Once off by 210 s of 491 s: the first batch's time was left out of the pace.
    now = datetime.now(UTC)
    experiment = experiments.open_experiment(
        name="tau2-airline-eta", domain="airline", arms=["single"], key_name="repro-eta",
        settings={"tasks": 10, "num_trials": 1, "split": "base", "seed": 300}, budget_nanousd=5 * NANO,
        estimate_nanousd=NANO, runs=[experiments.PlannedRun("single", 1, "m/a", "g-single")],
    )  # fmt: skip
    # τ² started 4 minutes ago; 3 simulations finished at once after 2 minutes, one more since.
    progress = {"evaluated": 4, "passed": 2, "infra_errors": 0, "per_task": {"1": [1, 1], "2": [1, 1], "3": [0, 1], "4": [0, 1]},
                "planned": 10, "started_at": (now - timedelta(minutes=4)).isoformat(),
                "first_at": (now - timedelta(minutes=2)).isoformat(), "updated_at": now.isoformat()}  # fmt: skip
    experiments.record_run(experiment, "single", 1, outcome=experiments.Outcome.PENDING, detail="running",
                           simulations=4, progress=progress)  # fmt: skip
    (arm,) = live.experiment_progress(experiment).arms
    assert arm.eta_seconds == pytest.approx(6 * 60)  # 4 in 4 minutes: 6 left at a minute each
    tracker = Tracker(planned=10)
    assert tracker.started_at <= datetime.now(UTC).isoformat() and tracker.first_at is None, "started before any is saved"
    assert "on 4 simulation(s)" in live.bar(arm, 5 * NANO)


def test_progress_is_its_keys_and_staff_need_the_experiment_permission(transactional_db, settings) -> None:
    """Issue 42 C4: any key read another key's spend per arm, and staff with
    only view_benchmarkrun read what the page keeps behind view_experiment."""
    from django.test import Client

    from passthru import auth

    experiment = _experiment(datetime.now(UTC))  # run under the key `repro-live`
    alice, runner, ops = "sk-marina-alice-key-000000000000000", "sk-marina-runner-key-00000000000000", "sk-marina-opsx-key-0000000000000000"
    settings.MODEL_API_KEYS = f"{alice}:alice,{runner}:repro-live,{ops}:repro/*"
    settings.MARINA_OPEN_API = False
    auth.forget()
    url = f"/api/experiments/{experiment.pk}/progress"
    client = Client(HTTP_HOST="127.0.0.1")

    def as_key(secret: str) -> int:
        return client.get(url, HTTP_AUTHORIZATION=f"Bearer {secret}").status_code

    assert as_key(runner) == 200
    assert as_key(alice) == 404 and as_key(ops) == 404  # `repro/…` callers only, not `repro-live`
    reader = auth.create_key("auditor", reads_all=True)
    assert as_key(reader) == 200
    status, body = get(staff_client(permissions=("view_benchmarkrun",)), url)
    assert status == 403 and body["error"]["type"] == "permission_error"
    assert get(staff_client(permissions=("view_benchmarkrun", "view_experiment")), url)[0] == 200
