"""The cost–reward frontier (ledger/reports/frontier.py): Marina's spend per
simulation (unknown, never 0, when it is not all known), pass^k with its
interval over tasks, the Pareto frontier; and the page, `/api/frontier` and
`manage.py frontier` giving the same figures."""
from __future__ import annotations

import io
import json
import re
from datetime import UTC, datetime

import pytest
from django.core.management import call_command
from django.test import Client

from ledger import demo
from ledger.benchmarks.metrics import summarize
from ledger.models import BenchmarkItem, BenchmarkRun
from ledger.reports.frontier import FrontierError, as_json, frontier
from tests.ledger.builders import flipped, make_run
from tests.marina.test_read_api import get, staff_client

BASE = {f"{t}#{n}": 1.0 if (t * 7 + n) % 4 else 0.0 for t in range(1, 11) for n in range(4)}
NANO = 10**9


def _spend(run: BenchmarkRun, dollars: float) -> BenchmarkRun:
    run.cost_nanousd, run.cost_source = round(dollars * NANO), "spend"
    run.save()
    return run


def test_the_frontier_keeps_the_points_nothing_beats_and_never_prices_the_unknown(db) -> None:
    cheap = _spend(make_run(flipped(BASE, "1#1", "2#1", "3#1", "4#1"), target="m/cheap", group="cheap"), 0.40)
    strong = _spend(make_run(BASE, target="m/strong", group="strong"), 2.00)
    worse = _spend(make_run(flipped(BASE, "1#1", "2#1"), target="m/worse", group="worse"), 3.00)  # dearer and weaker than strong
    given = make_run(BASE, target="m/given", group="given", cost_nanousd=NANO, cost_source="cli")  # not Marina's spend
    result = frontier()
    points = {p.key: p for p in result.points}
    assert {k for k, p in points.items() if p.on_frontier} == {f"run:{cheap.pk}", f"run:{strong.pk}"}
    assert [p.key for p in result.frontier] == [f"run:{cheap.pk}", f"run:{strong.pk}"]  # by cost
    assert not points[f"run:{worse.pk}"].on_frontier
    unknown = points[f"run:{given.pk}"]
    assert unknown.cost_per_simulation_nanousd is None and unknown.cost_nanousd is None and not unknown.on_frontier
    assert unknown.cost_basis.startswith("unknown")
    assert points[f"run:{strong.pk}"].cost_per_simulation_nanousd == 2 * NANO // 40
    # pass^1 is τ²'s, its interval brackets it
    p = points[f"run:{cheap.pk}"]
    assert p.value == pytest.approx(summarize(BenchmarkItem.objects.filter(run=cheap)).pass_hat_k[0])
    assert p.lo is not None and p.hi is not None and p.lo <= p.value <= p.hi
    data = as_json(result)
    assert next(d for d in data["points"] if d["key"] == f"run:{given.pk}")["cost_per_simulation_usd"] is None
    assert data["frontier"] == [f"run:{cheap.pk}", f"run:{strong.pk}"]


def test_linked_items_price_a_run_only_when_every_call_was_priced(db) -> None:
    run = make_run({"1#0": 1.0, "1#1": 0.0, "2#0": 1.0, "2#1": None})
    BenchmarkItem.objects.filter(run=run).update(link_status="linked", trace_cost_nanousd=5_000_000)
    assert frontier().points[0].cost_per_simulation_nanousd == round(20_000_000 / 3)  # 4 items' calls over 3 evaluated
    BenchmarkItem.objects.filter(run=run, item_id="1#1").update(trace_unpriced=1)
    point = frontier().points[0]
    assert point.cost_per_simulation_nanousd is None and point.cost_basis == "unknown: 1 unpriced call(s)"
    BenchmarkItem.objects.filter(run=run, item_id="1#1").update(trace_unpriced=0, link_status="unfound")
    assert frontier().points[0].cost_basis == "unknown: 1 of 4 items not linked to Marina's traces"


def test_groups_pool_their_runs_and_filters_and_k_apply(db) -> None:
    a1 = _spend(make_run(BASE, group="arm-a"), 1.0)
    a2 = _spend(make_run(flipped(BASE, "5#0"), group="arm-a"), 1.2)
    _spend(make_run(BASE, group="arm-b", benchmark="tau2-retail", domain="retail"), 1.0)
    result = frontier(benchmark="tau2-airline", by="group", k=2)
    (point,) = result.points
    assert point.run_ids == sorted([a1.pk, a2.pk]) and point.simulations == 80
    assert point.cost_per_simulation_nanousd == round(2.2 * NANO / 80)
    items = BenchmarkItem.objects.filter(run__in=[a1, a2])
    assert point.value == pytest.approx(summarize(items).pass_hat_k[1])
    assert [p.group for p in frontier(domain="retail").points] == ["arm-b"]
    assert frontier(group="none-such").points == []
    for bad in ({"k": 0}, {"by": "task"}, {"benchmark": "tau2-nowhere"}):
        with pytest.raises(FrontierError):
            frontier(**bad)


def test_a_run_on_a_task_subset_is_shown_apart_and_never_pushes_the_full_run_off(db) -> None:
    # Once a 1-simulation run (task 11: 1.000 [0.000, 1.000]) was the only frontier point.
    full = _spend(make_run(flipped(BASE, "1#1", "2#1"), target="m/full", group="full"), 2.0)
    one = _spend(make_run({"11#0": 1.0}, target="m/one", group="one"), 0.01)
    other_split = _spend(make_run({k: v for k, v in BASE.items() if not k.startswith("10#")}, target="m/test", group="test", task_split="test"), 1.0)
    fewer_trials = _spend(make_run({k: v for k, v in BASE.items() if k.endswith(("#0", "#1"))}, target="m/two", group="two"), 0.5)
    result = frontier()
    points = {p.key: p for p in result.points}
    assert [p.key for p in result.frontier] == [f"run:{full.pk}"]
    assert points[f"run:{one.pk}"].apart == "1 task(s), not the frontier's 10; trials 1, not 4"
    assert points[f"run:{other_split.pk}"].apart == "9 task(s), not the frontier's 10; split test, not base"
    assert points[f"run:{fewer_trials.pk}"].apart == "trials 2, not 4"
    assert not any(points[f"run:{r.pk}"].on_frontier for r in (one, other_split, fewer_trials))
    assert result.cohort == "10 task(s), split base, trials 4, retrieval config none"
    data = as_json(result)
    assert data["cohort"] == result.cohort
    assert {d["key"]: d["apart"] for d in data["points"]}[f"run:{full.pk}"] == ""
    # Another set of as many tasks: one frontier holds one of the two sets (in a tie, the newest's).
    shifted = {f"{int(k.split('#')[0]) + 10}#{k.split('#')[1]}": v for k, v in BASE.items()}
    moved = _spend(make_run(shifted, target="m/moved", group="moved"), 0.1)
    apart = {p.key: p.apart for p in frontier().points}
    assert (apart[f"run:{moved.pk}"], apart[f"run:{full.pk}"]) == ("", "another set of 10 tasks")
    # The page says why, the command too.
    html = staff_client().get("/reports/frontier/").content.decode()
    assert "1 task(s), not the frontier&#x27;s 10" in html or "1 task(s), not the frontier's 10" in html
    out = io.StringIO()
    call_command("frontier", stdout=out)
    assert "apart: 9 task(s), not the frontier's 10; split test, not base" in out.getvalue()


def test_runs_of_another_retrieval_config_are_apart(db) -> None:
    banking = {"benchmark": "tau2-banking_knowledge", "domain": "banking_knowledge"}
    bm25 = _spend(make_run(BASE, target="m/a", group="a", retrieval_config="bm25", **banking), 1.0)
    dense = _spend(make_run(BASE, target="m/b", group="b", retrieval_config="openai_embeddings", **banking), 1.0)
    dense2 = _spend(make_run(flipped(BASE, "1#0"), target="m/c", group="c", retrieval_config="openai_embeddings", **banking), 0.5)
    points = {p.key: p for p in frontier(benchmark="tau2-banking_knowledge").points}
    assert points[f"run:{bm25.pk}"].apart == "retrieval config bm25, not openai_embeddings"
    assert points[f"run:{dense.pk}"].apart == points[f"run:{dense2.pk}"].apart == ""


def test_a_group_filed_with_several_models_is_a_point_per_model(db) -> None:
    a = _spend(make_run(BASE, target="m/a", group="tau2-airline-single"), 1.0)
    b = _spend(make_run(flipped(BASE, "3#0"), target="m/b", group="tau2-airline-single"), 1.0)
    points = {p.key: p for p in frontier(by="group").points}
    assert set(points) == {"group:tau2-airline-single|m/a", "group:tau2-airline-single|m/b"}
    assert points["group:tau2-airline-single|m/a"].run_ids == [a.pk] and points["group:tau2-airline-single|m/b"].run_ids == [b.pk]


@pytest.mark.parametrize(
    "per_task",
    [[[1, 2], [1, 2]], [[2, 2]], [[2, 2], [2, 2]], [[1, 1], [1, 1], [0, 1]], [[4, 4]] * 29, [[0, 4]] * 12],
    ids=["0.5-from-4", "one-task", "all-passed-2", "three-tasks", "29-all-passed", "12-all-failed"],
)
def test_no_interval_on_few_simulations_has_zero_width(per_task) -> None:
    from ledger.reports.frontier import pass_k_interval

    value, lo, hi = pass_k_interval(per_task, 1)
    assert value is not None and lo is not None and hi is not None
    assert lo <= value <= hi and hi - lo > 0.05, (value, lo, hi)


def test_many_tasks_keep_the_normal_interval() -> None:
    from ledger.benchmarks.stats import Z95
    from ledger.reports.frontier import pass_k_interval

    per_task = [[1, 2]] * 20 + [[2, 2]] * 20
    value, lo, hi = pass_k_interval(per_task, 1)
    sd = (sum((v - 0.75) ** 2 for v in [0.5] * 20 + [1.0] * 20) / 39) ** 0.5
    assert value == pytest.approx(0.75) and (lo, hi) == pytest.approx((0.75 - Z95 * sd / 40**0.5, 0.75 + Z95 * sd / 40**0.5))


def _page_rows(html: str) -> dict[str, tuple[str, str]]:
    # A cost's exact figure is its title ("$0.00450000 exactly"; "unknown" for an unknown one).
    rows = re.findall(r'<tr data-key="([^"]+)" data-frontier="(true|false)">.*?data-figure="cost"><span class="money[^"]*" title="([^"]*)".*?data-figure="pass">([^<]*)<', html, re.S)
    return {key: (cost, value) for key, _, cost, value in rows}


def test_the_page_the_api_and_the_command_give_the_same_figures_on_the_demo(db) -> None:
    demo.load_demo(now=datetime(2026, 12, 2, 9, 30, tzinfo=UTC))
    client: Client = staff_client()
    status, api = get(client, "/api/frontier?by=run&k=1")
    assert status == 200 and api["benchmark"] == "tau2-airline" and api["shown"] == 8
    out = io.StringIO()
    call_command("frontier", "--json", stdout=out)
    assert json.loads(out.getvalue()) == api
    response = client.get("/reports/frontier/")
    assert response.status_code == 200
    html = response.content.decode()
    rows = _page_rows(html)
    assert set(rows) == {p["key"] for p in api["points"]}
    for p in api["points"]:
        cost, value = rows[p["key"]]
        assert cost == ("unknown" if p["cost_per_simulation_usd"] is None else f"${p['cost_per_simulation_usd']} exactly")
        assert value == f"{p['pass_hat_k']:.3f}"
    # the unpriced local arm is shown as unknown and drawn apart; the frontier is drawn
    local = next(p for p in api["points"] if p["target"] == "demo/gamma-local")
    assert local["cost_per_simulation_usd"] is None and rows[local["key"]][0] == "unknown"
    assert "cost unknown" in html and 'class="frontier"' in html
    assert len(api["frontier"]) >= 2
    # group points, pass^2, and a bad filter: 400 on the page, the envelope on the API
    assert get(client, "/api/frontier?by=group&k=2")[1]["shown"] == 4
    assert client.get("/reports/frontier/?k=99").status_code == 400
    status, body = get(client, "/api/frontier?benchmark=tau2-nowhere")
    assert status == 400 and body["error"]["param"] == "benchmark"


def test_the_command_prints_unknown_for_an_unpriced_run(db) -> None:
    make_run(BASE, target="m/given", cost_nanousd=NANO, cost_source="cli")
    out = io.StringIO()
    call_command("frontier", stdout=out)
    assert "unknown/sim" in out.getvalue() and "$0.00000000" not in out.getvalue()


# session, user, the user's permissions (2), the form's choices (4), benchmarks, newest, count, runs, item totals, arms,
# task sets; by group one more (the groups, then their runs)
FRONTIER_QUERIES = 16


def test_the_frontier_runs_the_same_few_queries_whatever_the_ledger_holds(
    db, django_assert_max_num_queries
) -> None:
    """One statement totals every chosen run's items (per run, and per point the tasks
    of each (successes, evaluated) pair): no query per run, group or task."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def make_ledger(runs: int, start: int = 0) -> None:
        for n in range(start, start + runs):
            run = _spend(make_run(flipped(BASE, f"{n % 10 + 1}#0"), target=f"m/{n % 3}", group=f"arm-{n % 3}"), 1.0 + n)
            BenchmarkItem.objects.filter(run=run).update(link_status="linked", trace_cost_nanousd=1_000)

    client = staff_client()
    paths = ["/reports/frontier/", "/reports/frontier/?by=group&k=2", "/api/frontier", "/api/frontier?by=group"]
    make_ledger(2)
    small = {}
    for path in paths:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(path).status_code == 200
        small[path] = len(captured.captured_queries)
        assert small[path] <= FRONTIER_QUERIES
    make_ledger(25, start=2)  # 27 runs, 1,080 items
    for path in paths:
        with django_assert_max_num_queries(small[path]):
            response = client.get(path)
        assert response.status_code == 200
    api = json.loads(client.get("/api/frontier").content)
    assert api["shown"] == 27 and all(p["tasks"] == 10 and p["simulations"] == 40 for p in api["points"])
    assert {p["key"] for p in json.loads(client.get("/api/frontier?by=group").content)["points"]} == {
        "group:arm-0", "group:arm-1", "group:arm-2"}


def test_the_default_benchmark_is_the_one_with_the_most_runs(db) -> None:
    for n in range(2):
        make_run({"1#0": 1.0}, group=f"retail-{n}", benchmark="tau2-retail", domain="retail")
    make_run({"1#0": 1.0}, group="airline-newest")  # the newest run, of a benchmark with one run
    assert frontier().benchmark == "tau2-retail"
    make_run({"1#0": 1.0}, group="airline-second")  # a tie: the newest run's benchmark
    assert frontier().benchmark == "tau2-airline"


def test_neighbouring_frontier_points_say_whether_they_are_told_apart(db) -> None:
    """Issue 46: each frontier point against the next dearer one, on the API and the page."""
    from ledger.benchmarks.power import distinguish

    worse = {f"{t}#{n}": 0.0 if t <= 6 else 1.0 for t in range(1, 11) for n in range(4)}  # pass^1 0.4
    cheap = _spend(make_run(worse, target="m/cheap"), 0.40)
    close = _spend(make_run(flipped(worse, "1#0"), target="m/close"), 0.80)  # +1 item: within noise
    strong = _spend(make_run({k: 1.0 for k in worse}, target="m/strong"), 2.00)  # pass^1 1.0
    result = frontier()
    assert [p.key for p in result.frontier] == [f"run:{cheap.pk}", f"run:{close.pk}", f"run:{strong.pk}"]
    points = {p.key: p for p in result.points}
    data = as_json(result)["neighbours"]
    assert [(n["cheaper"], n["dearer"], n["distinguishable"]) for n in data] == [
        (f"run:{cheap.pk}", f"run:{close.pk}", False), (f"run:{close.pk}", f"run:{strong.pk}", True),
    ]
    a, b = points[f"run:{cheap.pk}"], points[f"run:{close.pk}"]
    expected = distinguish((a.value, a.lo, a.hi), (b.value, b.lo, b.hi))  # type: ignore[arg-type]
    assert data[0]["diff"] == pytest.approx(0.025) and data[0]["smallest_detectable"] == expected.smallest_detectable
    html = staff_client().get("/reports/frontier/").content.decode()
    table = html.split('id="frontier-neighbours"')[1].split("</table>")[0]
    assert f'data-pair="run:{cheap.pk} run:{close.pk}" data-distinguishable="false"' in table
    assert f'data-pair="run:{close.pk} run:{strong.pk}" data-distinguishable="true"' in table
    assert "within noise" in table and "the difference is larger than noise" in table
