"""The report pages, through Django's test client, on runs built from the τ² fixtures."""
from __future__ import annotations

import csv
import io
import re
from datetime import UTC, date, datetime, timedelta

import pytest
from django.test import Client
from django.urls import reverse

from ledger.models import SpendDaily
from ledger.spend.selectors import utc_today
from tests.ledger.report_builders import record_trace

PAGES = ["/reports/", "/reports/runs/", "/reports/compare/", "/reports/spend/", "/reports/spend.csv", "/reports/traces/"]


def figure(html: str, name: str) -> str:
    """The text of the element marked data-figure=name (inside the `money` filter's span when there is one)."""
    match = re.search(rf'data-figure="{re.escape(name)}">(?:<span[^>]*>)*([^<]*)<', html)
    assert match, f"no figure {name!r} on the page"
    return match.group(1)


def exact(html: str, name: str) -> str:
    """The exact amount on hover of a money figure: its title."""
    match = re.search(rf'data-figure="{re.escape(name)}"><span class="money" title="([^"]*) exactly">', html)
    assert match, f"no money figure {name!r} on the page"
    return match.group(1)


@pytest.mark.parametrize("url", PAGES + ["/reports/runs/1/", "/reports/traces/1/"])
def test_every_page_needs_a_login(client: Client, db, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/?next=/reports/")


@pytest.mark.parametrize("url", PAGES)
def test_every_page_opens_for_a_logged_in_user(user_client: Client, runs, url: str) -> None:
    assert user_client.get(url).status_code == 200


def test_run_page_shows_the_ledgers_figures(user_client: Client, runs) -> None:
    run = runs["oracle"]
    html = user_client.get(reverse("reports:run", args=[run.pk])).content.decode()
    assert figure(html, "mean_reward") == "0.700"
    # τ²'s own figures for this file (fixtures README): 0.7, 0.516667, 0.4, 0.3.
    assert [figure(html, f"pass^{k}") for k in (1, 2, 3, 4)] == ["0.700", "0.517", "0.400", "0.300"]
    assert [f"{v:.3f}" for v in run.pass_hat_k] == ["0.700", "0.517", "0.400", "0.300"]
    assert figure(html, "infra_errors") == "0"
    assert (figure(html, "cost"), exact(html, "cost")) == ("$0.8000", "$0.80000000")
    assert (figure(html, "cost_per_item"), exact(html, "cost_per_item")) == ("$0.0200", "$0.02000000")  # 0.8 / 40 evaluated
    assert "given at import (--cost-usd)" in html
    assert "not comparable to the leaderboard" in html
    assert "The agent&#x27;s reasoning effort is not set" in html
    assert "differ from those recomputed" not in html
    assert html.count('class="cell cell-pass" title') == 28 and html.count('class="cell cell-fail" title') == 12
    assert "user_stop" in html
    assert '<svg xmlns="http://www.w3.org/2000/svg"' in html


def test_run_page_excludes_infrastructure_errors(user_client: Client, runs) -> None:
    html = user_client.get(reverse("reports:run", args=[runs["infra"].pk])).content.decode()
    # The intended τ² figures (fixtures README, pandas 2.3.3 row): k capped at 3.
    assert figure(html, "mean_reward") == "0.737"
    assert [figure(html, f"pass^{k}") for k in (1, 2, 3)] == ["0.725", "0.533", "0.400"]
    assert 'data-figure="pass^4"' not in html
    assert figure(html, "infra_errors") == "2"
    assert figure(html, "evaluated") == "38"
    assert (figure(html, "cost_per_item"), exact(html, "cost_per_item")) == ("$0.0300", "$0.03000000")  # 1.14 / 38 evaluated
    assert "2 simulation(s) ended in infrastructure_error" in html  # the importer's comparability reason
    assert html.count('class="cell cell-infra" title') == 2
    assert "infrastructure_error" in html


def test_run_grid_sorts_by_task_pass_rate(user_client: Client, runs) -> None:
    url = reverse("reports:run", args=[runs["oracle"].pk])
    natural = re.findall(r'<td >(\d+)</td>', user_client.get(url).content.decode())
    assert natural[:3] == ["7", "8", "11"]
    html = user_client.get(url, {"sort": "pass_rate"}).content.decode()
    rates = re.findall(r'<td class="num">(\d\.\d{3})</td>', html)
    assert rates == sorted(rates) and rates[0] == "0.250" and rates[-1] == "1.000"


def test_runs_list_filters_and_sorts(user_client: Client, runs) -> None:
    html = user_client.get("/reports/runs/", {"group": "arm-b"}).content.decode()
    assert f'href="/reports/runs/{runs["infra"].pk}/"' in html
    assert f'href="/reports/runs/{runs["oracle"].pk}/"' not in html
    html = user_client.get("/reports/runs/", {"benchmark": "tau2-retail"}).content.decode()
    assert re.findall(r'href="/reports/runs/(\d+)/"', html) == [str(runs["retail"].pk)]
    html = user_client.get("/reports/runs/", {"sort": "-pass1"}).content.decode()
    order = [int(pk) for pk in re.findall(r'href="/reports/runs/(\d+)/"', html)]
    assert order == [runs["retail"].pk, runs["infra"].pk, runs["oracle"].pk]  # 0.775, 0.725, 0.700
    tomorrow = (utc_today() + timedelta(days=1)).isoformat()
    html = user_client.get("/reports/runs/", {"since": tomorrow}).content.decode()
    assert "No runs match" in html


def test_a_run_with_nothing_evaluated_still_shows(user_client: Client, runs) -> None:
    from tests.ledger.builders import fixture_rewards, make_run

    broken = make_run(dict.fromkeys(fixture_rewards("airline-oracle")), group="broken")
    assert broken.pass_hat_k == [] and broken.mean_reward is None
    assert user_client.get("/reports/runs/").status_code == 200
    html = user_client.get(reverse("reports:run", args=[broken.pk])).content.decode()
    assert figure(html, "infra_errors") == "40" and figure(html, "evaluated") == "0"
    assert figure(html, "mean_reward") == "—"


def test_run_page_404s_for_an_unknown_run(user_client: Client, runs) -> None:
    assert user_client.get("/reports/runs/999999/").status_code == 404


def _spend(day: date, model: str, cost: int, calls: int = 1, key: str = "tester") -> SpendDaily:
    return SpendDaily.objects.create(
        day=day, key_name=key, requested_model=model, provider="openrouter", upstream_model=model,
        calls=calls, cost_nanousd=cost, prompt_tokens=100 * calls, completion_tokens=10 * calls,
    )  # fmt: skip


def test_spend_page_totals_and_chart(user_client: Client, db) -> None:
    today = utc_today()
    yesterday = today - timedelta(days=1)
    _spend(yesterday, "openai/gpt-5.2", 1_500_000_000, calls=3)
    _spend(yesterday, "anthropic/claude", 250_000_000, calls=2)
    _spend(today, "openai/gpt-5.2", 1_000, calls=1, key="other")
    _spend(today - timedelta(days=40), "openai/gpt-5.2", 9_000_000_000)  # outside the default 14 days
    html = user_client.get("/reports/spend/").content.decode()
    assert (figure(html, "total"), exact(html, "total")) == ("$1.75", "$1.75000100")
    assert figure(html, "calls") == "6"
    assert html.count('<g class="bar"') == 14  # one bar per day, zeros included
    assert 'data-category="' + yesterday.strftime("%m-%d") + '" data-total="1.75"' in html
    html = user_client.get("/reports/spend/", {"since": yesterday, "until": yesterday}).content.decode()
    assert (figure(html, "total"), exact(html, "total")) == ("$1.75", "$1.75000000")
    assert "$1.50000000" in html and "$0.25000000" in html


def test_spend_page_rejects_a_backwards_range(user_client: Client, db) -> None:
    response = user_client.get("/reports/spend/", {"since": "2025-02-02", "until": "2025-02-01"})
    assert response.status_code == 400
    assert "ends before it starts" in response.content.decode()


def test_spend_page_links_the_csv_of_the_range_it_shows(user_client: Client, db) -> None:
    # Only `until` given: the link carries it and the default `since` the page filled in.
    html = user_client.get("/reports/spend/", {"until": "2025-03-20", "model": "x&y"}).content.decode()
    link = re.search(r'href="([^"]*)" download>Download CSV', html)
    assert link is not None
    assert link.group(1) == reverse("reports:spend_csv") + "?until=2025-03-20&amp;model=x%26y&amp;since=2025-03-07"


def test_spend_csv(user_client: Client, db) -> None:
    day = date(2025, 3, 4)
    _spend(day, "openai/gpt-5.2", 1_234_567_891, calls=3)
    _spend(day + timedelta(days=1), "anthropic/claude", 5, calls=1)
    _spend(day + timedelta(days=30), "openai/gpt-5.2", 7)
    response = user_client.get("/reports/spend.csv", {"since": "2025-03-04", "until": "2025-03-05"})
    assert response["Content-Type"].startswith("text/csv")
    assert 'filename="marina-spend-2025-03-04-2025-03-05.csv"' in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0][:3] == ["day", "key_name", "requested_model"] and rows[0][-1] == "cost_usd"
    assert rows[1:] == [
        ["2025-03-04", "tester", "openai/gpt-5.2", "openrouter", "openai/gpt-5.2", "3", "0", "0", "300", "30", "0", "0", "1.234567891"],
        ["2025-03-05", "tester", "anthropic/claude", "openrouter", "anthropic/claude", "1", "0", "0", "100", "10", "0", "0", "0.000000005"],
    ]  # fmt: skip


def test_trace_list_filters(user_client: Client, db) -> None:
    now = datetime.now(UTC)
    record_trace(request_id="req-plain", model="openrouter/openai/gpt-5.2", started_at=now)
    record_trace(
        request_id="req-verify", model="marina/verify:openrouter/openai/gpt-5.2", key="ci",
        formation_label="revised", session="sess-42", started_at=now + timedelta(seconds=1),
        calls=[("openrouter/openai/gpt-5.2", 1_000_000), ("openrouter/openai/gpt-5.2", 500_000), ("openrouter/openai/gpt-5.2", 1_000_000)],
    )  # fmt: skip
    record_trace(request_id="req-failed", model="openrouter/openai/gpt-5.2", status="error", started_at=now)
    def ids(**params: str) -> set[str]:
        html = user_client.get("/reports/traces/", params).content.decode()
        return set(re.findall(r'<td class="nowrap">(req-[a-z]+)</td>', html))
    assert ids() == {"req-plain", "req-verify", "req-failed"}
    assert ids(key="ci") == {"req-verify"}
    assert ids(session="sess-42") == {"req-verify"}
    assert ids(formation_label="revised") == {"req-verify"}
    assert ids(status="error") == {"req-failed"}
    assert ids(model="openrouter/openai/gpt-5.2") == {"req-plain", "req-failed"}


def test_trace_page_shows_the_span_tree(user_client: Client, db) -> None:
    trace = record_trace(
        request_id="req-verify", model="marina/verify:openrouter/openai/gpt-5.2",
        calls=[("openrouter/openai/gpt-5.2", 1_000_000), ("openrouter/openai/gpt-4.1", 500_000), ("openrouter/openai/gpt-5.2", 1_000_000)],
    )  # fmt: skip
    html = user_client.get(reverse("reports:trace", args=[trace.pk])).content.decode()
    assert (figure(html, "cost"), exact(html, "cost")) == ("$0.0025", "$0.00250000")
    assert figure(html, "tokens") == "3,000 + 600"
    seqs = re.findall(r'data-seq="(\d+)"', html)
    assert seqs == ["1", "2", "3", "4"]
    # children are indented one level under the formation span
    assert html.count('style="padding-left: 1.8rem"><span class="branch">') == 3
    assert "cite the baggage rule" in html and "held_write" in html  # the review's decision
    assert "+300 ms" in html and "280 ms" in html


def test_trace_page_says_where_the_spans_are_with_the_otel_store(user_client: Client, db, settings) -> None:
    trace = record_trace(request_id="req-otel", model="openrouter/openai/gpt-5.2")
    page = reverse("reports:trace", args=[trace.pk])
    assert 'id="spans-in-collector"' not in user_client.get(page).content.decode()
    settings.MARINA_TRACE_STORE = "otel"
    html = user_client.get(page).content.decode()
    assert 'id="spans-in-collector"' in html and "<code>req-otel</code>" in html


def test_trace_page_redacts_stored_bodies(user_client: Client, db) -> None:
    trace = record_trace(request_id="req-body", model="openrouter/openai/gpt-5.2")
    trace.body = {"request": {"api_key": "sk-live-abcdefghijkl", "messages": [{"content": "Bearer abcdefghijklmnop"}]}}
    trace.save(update_fields=["body"])
    html = user_client.get(reverse("reports:trace", args=[trace.pk])).content.decode()
    assert "sk-live-abcdefghijkl" not in html and "abcdefghijklmnop" not in html
    assert "[redacted]" in html


def test_index_shows_yesterdays_spend_per_model(user_client: Client, runs) -> None:
    yesterday = utc_today() - timedelta(days=1)
    _spend(yesterday, "openai/gpt-5.2", 2_000_000_000, calls=4)
    _spend(yesterday, "anthropic/claude", 30_000_000, calls=1)
    _spend(utc_today(), "openai/gpt-5.2", 99_000_000_000)
    html = user_client.get("/reports/").content.decode()
    table = html.split('id="yesterday-spend"')[1].split("</table>")[0]
    assert "$2.00000000" in table and "$0.03000000" in table and "$2.03000000" in table
    assert "$99" not in table
    assert f'href="/reports/runs/{runs["retail"].pk}/"' in html


def test_compare_two_runs(user_client: Client, runs) -> None:
    from ledger.benchmarks.compare import compare_runs

    a, b = runs["oracle"], runs["infra"]
    html = user_client.get("/reports/compare/", {"mode": "runs", "run_a": a.pk, "run_b": b.pk}).content.decode()
    expected = compare_runs(a, b)
    assert figure(html, "shared_items") == "38"  # 40 items less B's two infrastructure errors
    assert figure(html, "diff_pass1") == f"{expected.diff_pass1:+.3f}"
    assert figure(html, "mcnemar_p") == f"{expected.mcnemar_p:.4f}"
    assert figure(html, "discordant") == f"{expected.a_only} / {expected.b_only}"
    lo, hi = expected.diff_ci
    assert f"interval [{lo:+.3f}, {hi:+.3f}]" in html
    assert "task-clustered paired" in html
    assert "infrastructure error(s)" in html  # compare's warning about B, shown as is
    # both curves on one chart, with an interval bar per point
    assert html.count('<g class="series"') == 2
    assert html.count('class="interval"') == len(expected.a.pass_hat_k) + len(expected.b.pass_hat_k)
    differences = html.split('id="differences"')[1].split("</table>")[0]
    assert re.search(rf'<td>pass\^1</td>\s*<td class="num">{expected.a.pass_hat_k[0]:.3f}</td>', differences)
    assert "$0.02000000" in differences and "$0.03000000" in differences and "+$0.01000000" in differences
    # The fixtures differ only by the two infrastructure errors: no shared task disagrees.
    assert "agree on every shared task" in html


def test_compare_lists_the_tasks_where_groups_disagree(user_client: Client, runs) -> None:
    from ledger.benchmarks.compare import compare_groups
    from tests.ledger.builders import fixture_rewards, flipped, make_run

    # group arm-c: the oracle run with task 8 now passing every trial (8#1..8#3 were failures)
    make_run(flipped(fixture_rewards("airline-oracle"), "8#1", "8#2", "8#3"), group="arm-c", label="fixed-8")
    html = user_client.get("/reports/compare/", {"mode": "groups", "group_a": "arm-a", "group_b": "arm-c"}).content.decode()
    expected = compare_groups("arm-a", "arm-c")
    assert figure(html, "diff_pass1") == f"{expected.diff_pass1:+.3f}" == "+0.075"
    assert figure(html, "discordant") == "0 / 3"
    disagree = html.split("Tasks where they disagree")[1]
    assert re.findall(r"<td>(\d+)</td>", disagree) == ["8"]
    assert "1/4" in disagree and "4/4" in disagree and "+0.750" in disagree
    assert "two-stage" in html and "has a single run" in html


def test_compare_explains_what_cannot_be_compared(user_client: Client, runs) -> None:
    from tests.ledger.builders import fixture_rewards, make_run

    html = user_client.get("/reports/compare/", {"mode": "groups", "group_a": "arm-a", "group_b": "retail"}).content.decode()
    # They share task 11's items only by id: refused, naming both.
    assert "group &#x27;arm-a&#x27; is tau2-airline and group &#x27;retail&#x27; is tau2-retail" in html
    broken = make_run(dict.fromkeys(fixture_rewards("airline-oracle")), group="broken")
    html = user_client.get("/reports/compare/", {"mode": "runs", "run_a": runs["oracle"].pk, "run_b": broken.pk}).content.decode()
    assert f"run #{runs['oracle'].pk} and run #{broken.pk} share no evaluated items" in html
    a = runs["oracle"].pk
    response = user_client.get("/reports/compare/", {"mode": "runs", "run_a": a, "run_b": a})
    assert response.status_code == 400 and f"A and B are the same run (#{a}): pick two different runs" in response.content.decode()
    response = user_client.get("/reports/compare/", {"mode": "runs", "run_a": a})
    assert response.status_code == 400 and "Pick both sides." in response.content.decode()
    response = user_client.get("/reports/compare/", {"mode": "runs", "run_a": a, "run_b": 999999})
    assert response.status_code == 400 and "Select a valid choice" in response.content.decode()  # docs/reports.md: an unknown choice
    assert user_client.get("/reports/compare/").status_code == 200  # nothing picked yet: the empty form


@pytest.mark.django_db(transaction=True)
def test_grid_cells_link_to_their_traces_and_a_trace_shows_its_item(user_client):
    """Issue 13: an item linked on import opens its traces from the run page's grid;
    the trace page names the item; an invalid run says so."""
    import json as _json

    from ledger.benchmarks import decisions
    from ledger.benchmarks.importers import import_tau2
    from ledger.benchmarks.validity import invalidate
    from ledger.models import BenchmarkItem, Trace
    from tests.ledger.benchmarks.test_links import _record_simulation
    from tests.ledger.tau2files import results

    sim = _json.loads(results("airline-oracle").read_text())["simulations"][0]
    ids = _record_simulation(sim)
    run = import_tau2(results("airline-oracle"), target="openrouter/oracle-agent").run
    item = BenchmarkItem.objects.get(run=run, item_id=f"{sim['task_id']}#{sim['trial']}")
    page = user_client.get(f"/reports/runs/{run.pk}/").content.decode()
    assert f"?item={item.pk}" in page and page.count("?item=") == 1
    # its cell's title says what verify decided on its calls (the agent's calls carry its labels)
    assert item.decisions["verify"] and f"; {decisions.summary(item.decisions, item.formation_counters)}" in page
    assert "verify: " in decisions.summary(item.decisions, item.formation_counters)
    assert page.count('class="unlinked"') == 39  # the other items: no trace found, and the page says so
    listed = user_client.get(f"/reports/traces/?item={item.pk}").content.decode()
    assert all(rid in listed for rid in ids)
    trace = Trace.objects.get(request_id=ids[0])
    detail = user_client.get(f"/reports/traces/{trace.pk}/").content.decode()
    assert f"run #{run.pk}" in detail and item.item_id in detail
    invalidate(run.pk, "upstream outage")
    assert "upstream outage" in user_client.get(f"/reports/runs/{run.pk}/").content.decode()
    assert ">invalid</span>" in user_client.get("/reports/runs/").content.decode()
