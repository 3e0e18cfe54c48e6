"""Learning from the airline fixture (12 failed simulations of 40) with the
scripted upstream as the judge, through Marina's own upstream path: the
proposals, the leak guard's refusals, the merging, the spend and traces, the
budget, and the two commands."""
from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from ledger.lessons.learning import learn
from ledger.models import BenchmarkRun, Lesson, SpendDaily, Trace
from passthru.lessons_judge import KEY_NAME, UpstreamJudge
from tests.ledger.lessons.judge_play import CONFIRM, COST, POLICY, JudgePlay
from tests.ledger.tau2files import FAKE_KEY, results

JUDGE = "openrouter/judge-model"
FAILED = 12  # airline-oracle: 28 × reward 1, 12 × reward 0

pytestmark = pytest.mark.django_db


def test_failed_simulations_are_judged_and_only_general_rules_are_kept(marina_config, upstream):
    play = JudgePlay(upstream)
    judge = UpstreamJudge(JUDGE)
    try:
        report = learn(results("airline-oracle"), judge=judge, judge_model=JUDGE, progress=False)
    finally:
        judge.close()

    assert len(play.bodies) == report.judged == report.failures == FAILED
    sent = play.bodies[0]
    assert sent["model"] == "judge-model" and sent["stream"] is False
    assert "[user]" in sent["messages"][1]["content"] and "REWARD BREAKDOWN" in sent["messages"][1]["content"]
    assert '"action_checks"' in sent["messages"][1]["content"]
    assert FAKE_KEY not in json.dumps(play.bodies), "τ²'s llm_args never reach the judge"

    # 4 judgements proposed 8 rules: 4 leaks refused, CONFIRM kept then merged twice, POLICY kept.
    assert report.proposed == 8
    # The id and the name are values of the expected actions: refused exactly, by the ground truth.
    assert dict(report.refused) == {
        "holds a ground-truth value": 2,
        "names a date": 1,
        "repeats 8+ words of the conversation verbatim": 1,
    }
    assert report.unreadable == 1
    lessons = {lesson.rule: lesson for lesson in Lesson.objects.all()}
    assert set(lessons) == {CONFIRM, POLICY}
    confirm = lessons[CONFIRM]
    assert (confirm.domain, confirm.trust, confirm.benchmark, confirm.support) == ("tools", "unverified", "tau2-airline", 3)
    assert len(confirm.item_ids) >= 2 and all("#" in i for i in confirm.item_ids)
    assert (lessons[POLICY].domain, lessons[POLICY].judge_model, lessons[POLICY].source_name) == (
        "code", JUDGE, "airline-oracle.results.json"
    )
    assert sorted(report.kept) == sorted(lesson.pk for lesson in lessons.values())
    assert report.merged == [confirm.pk, confirm.pk]

    # Metered and traced like any call, under the learning key.
    assert report.spent_nanousd == FAILED * int(COST * 1e9)
    traces = Trace.objects.filter(key_name=KEY_NAME)
    assert traces.count() == FAILED and {t.route for t in traces} == {"learn"}
    assert {t.requested_model for t in traces} == {JUDGE}
    spend = SpendDaily.objects.get(key_name=KEY_NAME)
    assert (spend.calls, spend.cost_nanousd, spend.upstream_model) == (FAILED, FAILED * int(COST * 1e9), "judge-model")
    # Nothing of any conversation was stored: no trace body, no lesson holds a leak.
    assert all(t.body is None for t in traces)


def test_no_conversation_is_stored_even_with_trace_bodies_on(marina_config, upstream, settings):
    from ledger.models import Span

    settings.MARINA_TRACE_BODIES = True
    JudgePlay(upstream)
    judge = UpstreamJudge(JUDGE)
    try:
        learn(results("airline-oracle"), judge=judge, judge_model=JUDGE, budget_nanousd=int(COST * 2 * 1e9))
    finally:
        judge.close()
    spans = Span.objects.filter(trace__key_name=KEY_NAME)
    assert spans.count() == 2 and all(s.body is None for s in spans)
    assert all(t.body is None for t in Trace.objects.filter(key_name=KEY_NAME))


def test_the_budget_stops_learning(marina_config, upstream):
    JudgePlay(upstream)
    judge = UpstreamJudge(JUDGE)
    try:
        report = learn(results("airline-oracle"), judge=judge, judge_model=JUDGE, budget_nanousd=int(COST * 3 * 1e9))
    finally:
        judge.close()
    assert report.budget_stop and report.judged == 3 and len(upstream.requests) == 3
    assert "stopped: the budget was reached after 3 of 12 judgement(s)" in report.lines()


def test_a_failing_judge_call_is_counted_and_learning_goes_on(marina_config, upstream):
    from tests.upstream import Reply

    upstream.script(Reply(status=500, json={"error": {"message": "boom"}}))
    JudgePlay(upstream)
    judge = UpstreamJudge(JUDGE)
    try:
        report = learn(results("airline-oracle"), judge=judge, judge_model=JUDGE)
    finally:
        judge.close()
    assert report.judge_errors == 1 and report.judged == FAILED
    assert Trace.objects.filter(key_name=KEY_NAME, status="error", http_status=500).count() == 1


def test_learn_lessons_command(marina_config, upstream):
    JudgePlay(upstream)
    out = StringIO()
    call_command("learn_lessons", str(results("airline-oracle")), "--judge-model", JUDGE, "--json", stdout=out)
    report = json.loads(out.getvalue())["lessons"]
    assert (report["judged"], report["proposed"], len(report["kept"])) == (FAILED, 8, 2)
    assert report["spent_usd"] == f"{FAILED * COST:.8f}"


def test_learn_lessons_refuses_bad_input_with_one_line(marina_config, upstream, tmp_path):
    with pytest.raises(CommandError, match="--judge-model nope/x: ") as caught:
        call_command("learn_lessons", str(results("airline-oracle")), "--judge-model", "nope/x")
    assert caught.value.returncode == 2
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(CommandError, match="broken.json"):
        call_command("learn_lessons", str(broken), "--judge-model", JUDGE)
    with pytest.raises(CommandError, match="--run 999: no such benchmark run"):
        call_command("learn_lessons", str(results("airline-oracle")), "--judge-model", JUDGE, "--run", "999")
    with pytest.raises(CommandError, match="--budget-usd must be a positive"):
        call_command("learn_lessons", str(results("airline-oracle")), "--judge-model", JUDGE, "--budget-usd", "0")
    assert upstream.requests == [] and Lesson.objects.count() == 0


def test_import_tau2_learn_records_the_run_as_provenance(marina_config, upstream):
    JudgePlay(upstream)
    out = StringIO()
    call_command(
        "import_tau2", str(results("airline-oracle")), "--target", "openrouter/oracle-agent",
        "--learn", "--judge-model", JUDGE, "--json", stdout=out,
    )  # fmt: skip
    printed = json.loads(out.getvalue())
    run = BenchmarkRun.objects.get()
    assert printed["lessons"]["judged"] == FAILED
    assert set(Lesson.objects.values_list("run_id", flat=True)) == {run.pk}
    with pytest.raises(CommandError, match="--learn needs --judge-model"):
        call_command("import_tau2", str(results("airline-oracle")), "--target", "x/y", "--learn")


@pytest.mark.django_db(transaction=True)  # the cap reads spend_daily on a thread of its own
def test_the_daily_spend_cap_stops_learning(marina_config, upstream, settings):
    from decimal import Decimal

    JudgePlay(upstream)
    settings.MARINA_DAILY_SPEND_CAP_USD = Decimal("0.001")  # two judgements' worth
    judge = UpstreamJudge(JUDGE)
    try:
        report = learn(results("airline-oracle"), judge=judge, judge_model=JUDGE)
    finally:
        judge.close()
    assert report.judged == 2 and len(upstream.requests) == 2
    assert report.stopped.startswith("Daily spend cap reached")
    assert any(line.startswith("stopped after 2 of 12 judgement(s): Daily spend cap reached") for line in report.lines())
    assert Trace.objects.filter(key_name=KEY_NAME, http_status=429, error_kind="spend_cap_reached").count() == 1


def test_the_progress_bar_counts_judgements_and_spend(marina_config, upstream, capsys):
    JudgePlay(upstream)
    call_command("learn_lessons", str(results("airline-oracle")), "--judge-model", JUDGE, "--progress", stdout=StringIO())
    bar = capsys.readouterr().err
    assert "learning [" in bar and f"] 12/12 ${FAILED * COST:.8f}" in bar
