"""Two trajectories side by side (ledger/reports/trajectories.py): the pair of
items shown, turns from the linked traces with their messages (bodies stored)
or skeleton, the formations' interventions, cost per turn, τ²'s reward
breakdown; the page and `/api/trajectories` agree; the compare page links each
disagreeing task to it."""
from __future__ import annotations

import io
import json
import re
from datetime import UTC, datetime, timedelta
from html import unescape

import pytest
from django.core.management import call_command

from kernel import money
from ledger import demo
from ledger.models import BenchmarkItem, BenchmarkItemTrace, BenchmarkRun
from ledger.reports.trajectories import TrajectoryError, pick_items, reward_rows, side_by_side
from ledger.spend.records import SpanRecord, TraceRecord
from ledger.spend.services import record_requests
from tests.ledger.builders import make_run
from tests.marina.test_read_api import get, staff_client

NOW = datetime(2026, 12, 2, 9, 30, tzinfo=UTC)


def _run(stem: str) -> BenchmarkRun:
    return BenchmarkRun.objects.get(source_name=f"demo/{stem}.ledger.json")


def test_the_pair_shown_is_one_where_the_sides_disagree(db) -> None:
    a = make_run({"1#0": 1.0, "1#1": 1.0, "1#2": 0.0})
    b = make_run({"1#0": 1.0, "1#1": 0.0, "1#2": 0.0})
    x, y = pick_items([a], [b], "1")
    assert (x.item_id, y.item_id) == ("1#1", "1#1") and x.correct and not y.correct
    x, y = pick_items([b], [a], "1")  # no paired item where A passed and B failed: B passed, A failed
    assert not x.correct and y.correct
    assert pick_items([a], [b], "1", trial=0)[0].item_id == "1#0"
    with pytest.raises(TrajectoryError, match="Side A has no simulation of task '9'"):
        pick_items([a], [b], "9")


def test_reward_rows_read_the_breakdown_and_survive_a_malformed_one() -> None:
    rows = reward_rows({"basis": ["DB", "COMMUNICATE"], "components": {"DB": 0.0, "COMMUNICATE": 1.0, "NL_ASSERTION": 1.0},
                        "db": {"match": False, "reward": 0.0}, "actions": {"met": 2, "total": 3},
                        "communicate": {"met": 1, "total": 1}})  # fmt: skip
    assert [(r["check"], r["result"], r["reward"], r["counts"]) for r in rows] == [
        ("DB check", "no match", 0.0, True), ("communicated info", "1 of 1 met", 1.0, True),
        ("actions", "2 of 3 met", None, False), ("nl assertion", "", 1.0, False),
    ]  # fmt: skip
    assert reward_rows({"basis": 1.0, "components": 1.0, "db": 1.0}) == []


def test_skeleton_turns_interventions_and_costs_from_the_traces(db) -> None:
    a = make_run({"4#0": 1.0})
    b = make_run({"4#0": 0.0}, target="marina/obligations:marina/argcheck:m")
    at = NOW - timedelta(hours=1)
    user = TraceRecord(request_id="u-1", started_at=at, path="/v1/chat/completions",
                       spans=[SpanRecord(seq=0, name="upstream", started_at=at, provider="p", upstream_model="u", cost_nanousd=None)])  # fmt: skip
    root = SpanRecord(seq=0, name="obligations+argcheck", started_at=at, detail={
        "obligations": "on;open=1;satisfied=0;declined=0;nudges=1;check=nudged-acted",
        "argcheck_calls": [{"call": "book_flight", "check": "flagged", "flagged": ["passengers.0.dob"]}]})
    agent = TraceRecord(request_id="b-1", started_at=at + timedelta(seconds=1), path="/v1/chat/completions",
                        route="obligations+argcheck", formation_label="obligations=nudged-acted", spans=[
        root,
        SpanRecord(seq=1, parent_seq=0, name="main", started_at=at, provider="p", upstream_model="m", cost_nanousd=3_000),
        SpanRecord(seq=2, parent_seq=0, name="argcheck-judge", started_at=at, provider="p", upstream_model="j", cost_nanousd=500,
                   detail={"call": "book_flight", "verdict": "unsupported", "doubt": "passengers.0.dob"}),
        SpanRecord(seq=3, parent_seq=0, name="retry", started_at=at, provider="p", upstream_model="m", cost_nanousd=2_000),
    ])  # fmt: skip
    ids = record_requests([user, agent])
    item = BenchmarkItem.objects.get(run=b)
    BenchmarkItemTrace.objects.bulk_create([BenchmarkItemTrace(item=item, trace_id=ids[0], role="user"),
                                            BenchmarkItemTrace(item=item, trace_id=ids[1], role="agent")])  # fmt: skip
    view = side_by_side(a=a.pk, b=b.pk, task="4")
    assert view.disagree and view.a.turns == [] and view.b.outcome == "failed"
    (turn,) = view.b.turns
    assert turn.messages is None  # no bodies stored: the skeleton
    assert [c.name for c in turn.calls] == ["main", "argcheck-judge", "retry"]
    assert turn.tools == [{"name": "book_flight", "check": "flagged", "arguments": ["passengers.0.dob"]}]
    kinds = [(i.kind, i.text) for i in turn.interventions]
    assert ("argcheck", "book_flight: unsupported (passengers.0.dob)") in kinds
    assert ("nudge", "(the note's text was not stored: MARINA_TRACE_BODIES is off)") in kinds
    assert [k for k, _ in kinds].count("nudge") == 1  # the retry's, not the stack's header again
    # the agent's calls are priced, the user simulator's call is not: the turn's cost is unknown, never 0
    assert turn.agent_cost_nanousd == 5_500 and turn.user_calls == 1 and turn.user_cost_nanousd is None
    assert turn.cost_nanousd is None


def _page_turn_costs(html: str, side: int) -> list[str]:
    rows = re.findall(r"<tr><th>\d+</th>(.*?)</tr>", html, re.S)
    costs = []
    for row in rows:
        cells = re.findall(r'<td class="turn">(.*?)</td>', row, re.S)
        match = re.search(r'data-figure="turn-cost"><span class="money[^"]*" title="([^"]*)"', cells[side])  # the exact figure
        if match:
            costs.append(match.group(1))
    return costs


def test_page_and_api_agree_on_the_demo_and_compare_links_to_it(db) -> None:
    demo.load_demo(now=NOW)
    plain, verify = _run("airline-1"), _run("airline-1-verify")
    client = staff_client()
    status, api = get(client, f"/api/trajectories?a={plain.pk}&b={verify.pk}&task=23")
    assert status == 200 and api["disagree"]
    assert (api["a"]["outcome"], api["b"]["outcome"]) == ("failed", "passed")
    out = io.StringIO()
    call_command("trajectories", str(plain.pk), str(verify.pk), "--task", "23", "--json", stdout=out)
    assert json.loads(out.getvalue()) == api
    # bodies stored for task 23: the plain side books economy; verify's review catches it and the revision is what went out
    a_calls = [c for t in api["a"]["turns"] for m in t["messages"] for c in m["tool_calls"]]
    assert '"cabin": "economy"' in a_calls[-1]["arguments"]
    b_turns = api["b"]["turns"]
    revised = [t for t in b_turns if any(i["kind"] == "revised" for i in t["interventions"])]
    assert len(revised) == 1
    assert '"cabin": "business"' in revised[0]["messages"][-1]["tool_calls"][0]["arguments"]
    assert any("keep the business cabin" in i["text"] for i in revised[0]["interventions"] if i["kind"] == "review")
    assert api["a"]["reward_breakdown"][0] == {"check": "DB check", "result": "no match", "missed": [], "reward": 0.0, "counts": True}

    response = client.get(f"/reports/trajectories/?a={plain.pk}&b={verify.pk}&task=23")
    assert response.status_code == 200
    html = response.content.decode()
    for side, letter in ((0, "a"), (1, "b")):
        assert _page_turn_costs(html, side) == [f"${t['cost_usd']} exactly" for t in api[letter]["turns"]]
    assert html.count('data-kind="revised"') == 1 and "A failed where B passed" in html
    assert unescape(html).count('"cabin": "economy"') >= 1

    # the compare page's per-task table links here, for runs and for groups
    html = client.get(f"/reports/compare/?mode=runs&run_a={plain.pk}&run_b={verify.pk}").content.decode()
    assert f'href="/reports/trajectories/?a={plain.pk}&amp;b={verify.pk}&amp;task=23"' in html
    html = client.get("/reports/compare/?mode=groups&group_a=demo%3Aairline-plain&group_b=demo%3Aairline-verify").content.decode()
    link = re.search(r'href="(/reports/trajectories/\?group_a=[^"]+)"', html)
    assert link and client.get(unescape(link.group(1))).status_code == 200

    # the obligations+argcheck arm: a nudge with the note's text, an argcheck judgement
    mini = _run("airline-mini")
    status, api = get(client, f"/api/trajectories?a={plain.pk}&b={mini.pk}&task=23")
    notes = [i["text"] for t in api["b"]["turns"] for i in t["interventions"] if i["kind"] == "nudge"]
    assert any("cabin = economy" in n for n in notes)
    assert any(i["kind"] == "argcheck" for t in api["b"]["turns"] for i in t["interventions"])

    # unknown task and bad parameters
    assert get(client, f"/api/trajectories?a={plain.pk}&b={verify.pk}&task=nope")[0] == 404
    status, body = get(client, f"/api/trajectories?a={plain.pk}&group_a=x&b={verify.pk}&task=23")
    assert status == 400 and body["error"]["param"] == "a"
    assert client.get(f"/reports/trajectories/?a={plain.pk}&b={verify.pk}&task=nope").status_code == 404


TRAJECTORY_QUERIES = 12  # session, user, the user's permissions (2), a run a side, the items of the task a side, a side's links (with traces) and spans


def test_the_trajectories_run_the_same_few_queries_however_long_the_simulations(
    db, django_assert_max_num_queries
) -> None:
    """Each side's traces come with its links in one query and their spans in one
    more: no query per turn, trace or span."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    a, b = make_run({"4#0": 1.0, "5#0": 1.0}), make_run({"4#0": 0.0, "5#0": 0.0}, target="marina/verify:m")

    def link(run: BenchmarkRun, task: str, turns: int) -> None:
        item = BenchmarkItem.objects.get(run=run, task_id=task)
        records = []
        for n in range(turns):
            at = NOW + timedelta(seconds=2 * n)
            records.append(TraceRecord(request_id=f"{run.pk}-{task}-u{n}", started_at=at, path="/v1/chat/completions",
                                       spans=[SpanRecord(seq=0, name="upstream", started_at=at, provider="p", cost_nanousd=1_000)]))  # fmt: skip
            records.append(TraceRecord(request_id=f"{run.pk}-{task}-a{n}", started_at=at + timedelta(seconds=1),
                                       path="/v1/chat/completions", route="verify", spans=[
                SpanRecord(seq=0, name="verify", started_at=at),
                SpanRecord(seq=1, parent_seq=0, name="draft", started_at=at, provider="p", cost_nanousd=2_000),
                SpanRecord(seq=2, parent_seq=0, name="review", started_at=at, provider="p", cost_nanousd=500,
                           detail={"verdict": "approve"}),
            ]))  # fmt: skip
        ids = record_requests(records)
        BenchmarkItemTrace.objects.bulk_create([
            BenchmarkItemTrace(item=item, trace_id=pk, role="user" if n % 2 == 0 else "agent") for n, pk in enumerate(ids)
        ])  # fmt: skip

    link(a, "4", 1)
    link(b, "4", 1)
    link(a, "5", 30)
    link(b, "5", 30)
    client = staff_client()
    counts = {}
    for task in ("4", "5"):
        for path in (f"/reports/trajectories/?a={a.pk}&b={b.pk}&task={task}", f"/api/trajectories?a={a.pk}&b={b.pk}&task={task}"):
            with CaptureQueriesContext(connection) as captured:
                assert client.get(path).status_code == 200
            counts[(task, path.split("?")[0])] = len(captured.captured_queries)
    for kind in ("/reports/trajectories/", "/api/trajectories"):
        assert counts[("5", kind)] == counts[("4", kind)]  # 30 turns a side cost no more queries than 1
    with django_assert_max_num_queries(TRAJECTORY_QUERIES):
        response = client.get(f"/api/trajectories?a={a.pk}&b={b.pk}&task=5")
    api = json.loads(response.content)
    assert len(api["a"]["turns"]) == len(api["b"]["turns"]) == 30
    # each turn: the agent's draft and review, and the user simulator's call before it
    assert all(t["cost_usd"] == money.plain(3_500) and t["user_calls"] == 1 for t in api["b"]["turns"])
    assert [i["kind"] for i in api["b"]["turns"][0]["interventions"]] == ["review"]


def test_the_breakdown_names_the_missed_actions(db) -> None:
    rows = reward_rows({"basis": ["DB"], "components": {"DB": 0.0}, "db": {"match": False, "reward": 0.0},
                        "actions": {"met": 3, "total": 4, "missed": ["update_reservation_flights"]}})  # fmt: skip
    actions = next(r for r in rows if r["check"] == "actions")
    assert (actions["result"], actions["missed"]) == ("3 of 4 met", ["update_reservation_flights"])
    # A breakdown imported before names were kept still reads as counts.
    assert next(r for r in reward_rows({"actions": {"met": 1, "total": 2}}) if r["check"] == "actions")["missed"] == []


def test_the_page_names_the_missed_action(user_client) -> None:
    a = make_run({"1#0": 1.0}, group="arm-a")
    b = make_run({"1#0": 0.0}, group="arm-b")
    BenchmarkItem.objects.filter(run=b).update(
        reward_breakdown={"basis": ["DB"], "db": {"match": False, "reward": 0.0},
                          "actions": {"met": 3, "total": 4, "missed": ["update_reservation_flights"]}}  # fmt: skip
    )
    html = user_client.get(f"/reports/trajectories/?a={a.pk}&b={b.pk}&task=1").content.decode()
    cell = html.split('id="breakdown-b"')[1].split('data-check="actions">')[1].split("</td>")[0]
    assert cell == "3 of 4 met: missed <code>update_reservation_flights</code>"
