"""The overview page (/reports/) and `/`: figures against the ledger, empty
states that say what to do, the demo note and a bounded number of queries."""
from __future__ import annotations

import re
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal

import pytest
from django.test import Client

from ledger import demo
from ledger.reports import overview
from ledger.spend.selectors import utc_today
from tests.ledger.builders import make_run
from tests.ledger.report_builders import record_trace


def figure(html: str, name: str) -> str:
    # The text shown, inside the `money` filter's span when there is one (its title holds the exact figure).
    match = re.search(rf'data-figure="{re.escape(name)}">(?:<span[^>]*>)*([^<]*)<', html)
    assert match, f"no figure {name!r} on the page"
    return match.group(1)


def test_the_root_sends_people_to_the_overview_or_its_login(client: Client, user_client: Client) -> None:
    """`/` sends a visitor to the login page and back, a user to the first page they may open."""
    assert client.get("/")["Location"] == "/admin/login/?next=/"
    assert client.get("/reports/")["Location"].startswith("/admin/login/?next=/reports/")
    assert user_client.get("/", follow=True).redirect_chain == [("/reports/", 302)]


def test_an_empty_ledger_says_what_to_do_next(user_client: Client) -> None:
    html = user_client.get("/reports/").content.decode()
    for anchor, hint in [
        ("no-traffic", "manage.py create_key NAME"),
        ("no-traffic", "manage.py demo"),
        ("no-decisions", "marina/verify:"),
        ("no-runs", "manage.py import_tau2"),
    ]:
        assert hint in html.split(f'id="{anchor}"')[1].split("</p>")[0]
    assert figure(html, "calls_today") == "0" and figure(html, "spend_week") == "$0.00"
    assert 'id="demo-note"' not in html


def test_overview_figures_come_from_the_ledger(user_client: Client, settings) -> None:
    settings.MARINA_DAILY_SPEND_CAP_USD = Decimal("0.01")
    now = datetime.now(UTC)
    midnight = datetime.combine(utc_today(), time(0), tzinfo=UTC)

    def today(minutes_ago: int) -> datetime:
        # Minutes ago, or just after midnight when that was yesterday (the first minutes of a UTC day).
        return max(now - timedelta(minutes=minutes_ago), midnight + timedelta(seconds=10 - minutes_ago))

    yesterday_noon = datetime.combine(utc_today() - timedelta(days=1), time(12), tzinfo=UTC)
    record_trace(request_id="t1", model="openrouter/openai/gpt-5.2", key="alice", started_at=today(5))
    record_trace(request_id="t2", model="openrouter/openai/gpt-5.2", key="alice", started_at=today(1),
                 status="error", calls=[("openrouter/openai/gpt-5.2", None)])  # fmt: skip
    record_trace(
        request_id="t3", model="marina/verify:openrouter/openai/gpt-5.2", key="ci", started_at=today(2),
        formation_label="revised",
        calls=[("openrouter/openai/gpt-5.2", 3_000_000), ("openrouter/openai/gpt-5.2", 1_000_000), ("openrouter/openai/gpt-5.2", 2_000_000)],
    )  # fmt: skip
    record_trace(request_id="t4", model="openrouter/qwen/qwen3", key="bob", started_at=yesterday_noon,
                 calls=[("openrouter/qwen/qwen3", 7_000_000)])  # fmt: skip
    html = user_client.get("/reports/").content.decode()
    if now.date() != utc_today():  # pragma: no cover - the test straddled midnight
        pytest.skip("UTC midnight passed during the test")
    assert figure(html, "calls_today") == "5"  # upstream calls: 1 + 1 + 3
    assert figure(html, "errors_today") == "1"
    # Shown as a person reads it (4 places under a dollar), exact on hover.
    assert figure(html, "spend_today") == "$0.0073"  # 1.25 m + 6 m nano-dollars
    assert 'data-figure="spend_today"><span class="money" title="$0.00725000 exactly">$0.0073</span>' in html
    assert figure(html, "spend_yesterday") == "$0.0070"
    assert figure(html, "spend_week") == "$0.0143"
    assert "of the $0.01 daily cap (72 %)" in html
    assert 'class="reference"' in html  # today's bar came near the cap: the line is drawn
    # Marina's overhead is 4.5 ms on every trace the builder records; its spans last 280 ms.
    assert figure(html, "overhead_p50_1") == "4.5 ms" and figure(html, "upstream_p50_1") == "280 ms"
    decisions = html.split('id="decisions"')[1].split("</table>")[0]
    assert "verify" in decisions and "revised" in decisions and "100 %" in decisions
    top_models = html.split('id="top-models"')[1].split("</table>")[0]
    assert top_models.index("openrouter/qwen/qwen3") < top_models.index("marina/verify:")  # by spend
    assert 'href="/reports/traces/?key=alice"' in html
    assert "$0.00700000" in html.split('id="yesterday-spend"')[1].split("</table>")[0]
    assert "$0.00725000" in html.split('id="today-spend"')[1].split("</table>")[0]


def test_latency_percentiles_are_over_a_bounded_sample(db, monkeypatch: pytest.MonkeyPatch) -> None:
    now = datetime.now(UTC)
    for n in range(6):
        record_trace(request_id=f"s{n}", model="openrouter/openai/gpt-5.2", started_at=now - timedelta(minutes=n))
    monkeypatch.setattr(overview, "LATENCY_SAMPLE", 4)
    figures = overview.latency(timedelta(hours=1), "last hour", now=now + timedelta(seconds=1))
    assert figures.overhead.count == 4 and figures.overhead.sampled
    assert figures.upstream.count == 4 and figures.upstream.p99 == 280.0


def test_the_latest_runs_show_pass1_and_link_to_their_pages(user_client: Client) -> None:
    runs = [
        make_run({"1#0": 1.0, "1#1": 0.0 if n else 1.0}, group=f"arm-{n}", pass_hat_k=[0.5 if n else 1.0])
        for n in range(3)
    ]
    html = user_client.get("/reports/").content.decode()
    assert html.count('<g class="bar"') >= 3 and html.count('class="chart-box fit runs-chart"') == 1
    for run in runs:
        assert f'href="/reports/runs/{run.pk}/"' in html
    assert "1.000" in html and "0.500" in html


def test_the_demo_is_announced_with_how_to_remove_it(user_client: Client) -> None:
    demo.load_demo(now=datetime.now(UTC))
    html = user_client.get("/reports/").content.decode()
    assert "manage.py demo --remove" in html.split('id="demo-note"')[1].split("</p>")[0]
    assert figure(html, "spend_week") != "$0.00000000" and "demo:airline-verify" in html


def test_the_overview_runs_a_fixed_number_of_queries(user_client: Client, django_assert_max_num_queries) -> None:
    now = datetime.now(UTC)
    for n in range(12):
        make_run({"1#0": 1.0, "2#0": 0.0}, group=f"g{n % 3}", pass_hat_k=[0.5])
        record_trace(request_id=f"q{n}", model=f"openrouter/m{n}", key=f"k{n}", started_at=now - timedelta(hours=n),
                     formation_label="approved" if n % 2 else "")  # fmt: skip
    with django_assert_max_num_queries(20):
        assert user_client.get("/reports/").status_code == 200


def test_the_hour_row_counts_that_hours_requests_and_their_calls_however_the_ids_fall(user_client: Client) -> None:
    """Traces spread over a day, written out of time order (an import, a slow request): ids do
    not follow time, so the hour's calls are its own traces', not a range of ids."""
    now = datetime.now(UTC)
    # Written oldest last: the hour's traces get the smallest ids and a day-old one the largest.
    for n in range(3):
        record_trace(request_id=f"hour-{n}", model="openrouter/openai/gpt-5.2", started_at=now - timedelta(minutes=10 + n))
    for hours in (2, 5, 9, 13, 17, 22):
        calls = [("openrouter/openai/gpt-5.2", 1_000_000)] * 3  # a verify request: 3 calls
        record_trace(request_id=f"day-{hours}", model="marina/verify:openrouter/openai/gpt-5.2",
                     started_at=now - timedelta(hours=hours), calls=calls)  # fmt: skip
    record_trace(request_id="hour-late", model="openrouter/openai/gpt-5.2", started_at=now - timedelta(minutes=30))
    hour = overview.latency(timedelta(hours=1), "last hour", now=now)
    day = overview.latency(timedelta(days=1), "last 24 hours", now=now)
    assert (hour.overhead.count, hour.upstream.count) == (4, 4)  # four requests of one call each
    assert (day.overhead.count, day.upstream.count) == (10, 4 + 6 * 3)
    assert hour.upstream.p99 == 280.0 and not hour.overhead.sampled
    rows = user_client.get("/reports/").content.decode().split('id="latency"')[1].split("</table>")[0].split("<tr>")
    hour_row, day_row = rows[2], rows[3]
    assert re.findall(r'class="num">(\d+)', hour_row) == ["4", "4"]
    assert re.findall(r'class="num">(\d+)', day_row) == ["10", "22"]


def test_a_small_share_of_decisions_reads_below_one_percent(user_client: Client) -> None:
    now = datetime.now(UTC)
    calls = [("openrouter/openai/gpt-5.2", 1_000_000)] * 2
    for n in range(201):
        label = "revised" if n == 0 else "approved"
        record_trace(request_id=f"v{n}", model="marina/verify:openrouter/openai/gpt-5.2", started_at=now - timedelta(minutes=n),
                     formation_label=label, calls=calls)  # fmt: skip
    decisions = user_client.get("/reports/").content.decode().split('id="decisions"')[1].split("</table>")[0]
    revised = decisions.split(">revised<")[1].split("</tr>")[0]
    assert "&lt;1 %" in revised and ">0 %" not in decisions  # 1 of 201
    assert "100 %" in decisions.split(">approved<")[1].split("</tr>")[0]  # 200 of 201 rounds to 100


def test_the_pass1_chart_does_not_mix_benchmarks(user_client: Client) -> None:
    make_run({"1#0": 1.0}, group="air", benchmark="tau2-airline", pass_hat_k=[1.0])
    make_run({"1#0": 0.0}, group="ret", benchmark="tau2-retail", pass_hat_k=[0.0])
    html = user_client.get("/reports/").content.decode()
    charts = html.split('id="runs-charts"')[1].split("</div>")[0]
    assert charts.count('class="chart-box fit runs-chart"') == 2
    assert "pass^1 of the latest tau2-airline runs" in charts and "pass^1 of the latest tau2-retail runs" in charts
