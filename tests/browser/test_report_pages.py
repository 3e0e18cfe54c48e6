"""A person's tour, in Chromium: log in through the admin's form, open every
report page and the ledger's admin changelists, check the figures shown
against the ledger, and fail on any console error or failed request.
Screenshots of each page land in artifacts/screenshots/."""
from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, time, timedelta

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from kernel import money
from ledger.benchmarks.compare import compare_groups, compare_runs
from ledger.benchmarks.importers import import_tau2
from ledger.models import BenchmarkRun, SpendDaily, Trace
from ledger.spend.selectors import spend_totals, utc_today
from tests.browser.conftest import ADMIN_PASSWORD, PageProblems, screenshot
from tests.ledger.report_builders import record_trace
from tests.ledger.tau2files import results

pytestmark = pytest.mark.browser


def _import(name: str, **options: object) -> BenchmarkRun:
    return import_tau2(results(name), **options).run


def _ledger() -> dict[str, object]:
    """Two imported airline runs in two groups, a retail run, and yesterday's
    and today's traffic through the real ledger writer."""
    runs = {
        "a": _import("airline-oracle", target="openrouter/openai/gpt-5.2", group="baseline", cost_usd=0.8),
        "b": _import(
            "airline-infra-errors", target="marina/verify:openrouter/openai/gpt-5.2", group="verify", cost_usd=1.14
        ),
        "retail": _import("retail-oracle", target="openrouter/openai/gpt-5.2", group="retail-baseline"),
    }
    yesterday = datetime.combine(utc_today() - timedelta(days=1), time(15, 0), tzinfo=UTC)
    for n in range(3):
        record_trace(
            request_id=f"req-plain-{n}", model="openrouter/openai/gpt-5.2", key="alice",
            started_at=yesterday + timedelta(minutes=n), calls=[("openrouter/openai/gpt-5.2", 2_500_000)],
        )  # fmt: skip
    verify = record_trace(
        request_id="req-verify", model="marina/verify:openrouter/openai/gpt-5.2", key="ci",
        formation_label="revised", session="sim-17-2", started_at=yesterday + timedelta(hours=1),
        calls=[("openrouter/openai/gpt-5.2", 3_000_000), ("openrouter/anthropic/claude-sonnet-4.5", 4_000_000),
               ("openrouter/openai/gpt-5.2", 3_500_000)],
    )  # fmt: skip
    record_trace(request_id="req-today", model="openrouter/openai/gpt-5.2", key="alice", calls=[("openrouter/openai/gpt-5.2", 1_000)])
    record_trace(
        request_id="req-failed", model="openrouter/openai/gpt-5.2", key="alice", status="error",
        started_at=yesterday, calls=[("openrouter/openai/gpt-5.2", None)],
    )  # fmt: skip
    User.objects.create_superuser("admin", "admin@example.invalid", ADMIN_PASSWORD)
    return {**runs, "verify_trace": verify}


def _figure(page: Page, name: str) -> str:
    return page.locator(f'[data-figure="{name}"]').inner_text().strip()


def _exact(page: Page, name: str) -> str | None:
    """A money figure's exact amount: the title of the `money` filter's span."""
    return page.locator(f'[data-figure="{name}"] .money').get_attribute("title")


def _visit(page: Page, problems: PageProblems, url: str, shot: str) -> None:
    page.goto(url)
    page.wait_for_load_state("networkidle")
    screenshot(page, shot)
    assert problems.seen == [], f"{url}: {problems.seen}"


def test_a_person_browses_runs_comparisons_spend_and_traces(marina_url: str, page) -> None:
    page, problems = page
    data = _ledger()
    run_a, run_b = data["a"], data["b"]
    assert isinstance(run_a, BenchmarkRun) and isinstance(run_b, BenchmarkRun)

    # Anonymous: sent to the admin's login form, which brings us back.
    page.goto(f"{marina_url}/reports/")
    assert "/admin/login/" in page.url
    screenshot(page, "00-login")
    page.fill("#id_username", "admin")
    page.fill("#id_password", ADMIN_PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{marina_url}/reports/")
    assert problems.seen == [], problems.seen

    # The overview: today's and yesterday's figures from spend_daily, the
    # formation's decision, charts that link to their pages, the latest runs.
    _visit(page, problems, f"{marina_url}/reports/", "01-reports-index")
    yesterday = utc_today() - timedelta(days=1)
    spent_yesterday = spend_totals(since=yesterday, until=yesterday).cost_nanousd
    assert _figure(page, "spend_yesterday") == money.short(spent_yesterday)  # exact on hover:
    assert _exact(page, "spend_yesterday") == f"${spent_yesterday / 1e9:.8f} exactly"
    assert _figure(page, "calls_today") == str(spend_totals(since=utc_today(), until=utc_today()).calls)
    expect(page.locator("#spend-chart svg.chart")).to_be_visible()
    expect(page.locator("#hourly-chart svg.chart")).to_be_visible()
    expect(page.locator("#decisions")).to_contain_text("revised")
    expect(page.locator("#top-keys")).to_contain_text("alice")
    latency = page.locator("#latency tbody tr").nth(1)
    expect(latency).to_contain_text("4.5 ms")  # the builder's overhead on every trace
    for run in BenchmarkRun.objects.all():
        expect(page.locator(f'a[href="/reports/runs/{run.pk}/"]')).to_have_count(1)
    page.locator("#spend-chart a").first.click()
    page.wait_for_url(f"{marina_url}/reports/spend/")
    page.goto(f"{marina_url}/")  # the root is the overview
    page.wait_for_url(f"{marina_url}/reports/")
    page.wait_for_load_state("networkidle")
    assert problems.seen == [], problems.seen
    table = page.locator("#yesterday-spend")
    for model in ("openrouter/openai/gpt-5.2", "marina/verify:openrouter/openai/gpt-5.2"):
        cost = sum(r.cost_nanousd for r in SpendDaily.objects.filter(day=yesterday, requested_model=model))
        expect(table.locator(f'tr:has(td:text-is("{model}"))')).to_contain_text(money.short(cost))
    total = spend_totals(since=yesterday, until=yesterday).cost_nanousd
    expect(table.locator("tfoot")).to_contain_text(money.short(total))

    # Runs list: every imported run with its pass^1; filter by group.
    _visit(page, problems, f"{marina_url}/reports/runs/", "02-runs")
    for run in BenchmarkRun.objects.all():
        row = page.locator("tbody tr", has=page.locator(f'a[href="/reports/runs/{run.pk}/"]'))
        expect(row).to_contain_text(f"{run.pass_hat_k[0]:.3f}")
        expect(row).to_contain_text(run.group)
    page.select_option("select[name=group]", "verify")
    page.click("form.filters button[type=submit]")
    page.wait_for_load_state("networkidle")
    expect(page.locator("tbody tr")).to_have_count(1)
    screenshot(page, "03-runs-filtered")
    page.click(f'a[href="/reports/runs/{run_b.pk}/"]')

    # Run page: figures from the ledger, grid, terminations.
    page.wait_for_load_state("networkidle")
    screenshot(page, "04-run-infra-errors")
    assert _figure(page, "mean_reward") == f"{run_b.mean_reward:.3f}"
    assert [_figure(page, f"pass^{k}") for k in (1, 2, 3)] == [f"{v:.3f}" for v in run_b.pass_hat_k]
    assert _figure(page, "infra_errors") == "2"
    assert _figure(page, "cost_per_item") == money.short(run_b.cost_per_item_usd)
    assert _exact(page, "cost_per_item") == f"${run_b.cost_per_item_usd:.8f} exactly"
    expect(page.locator("td.outcome .cell-infra")).to_have_count(2)
    expect(page.locator("#comparability")).to_contain_text("infrastructure_error")
    _visit(page, problems, f"{marina_url}/reports/runs/{run_a.pk}/", "05-run")
    assert [_figure(page, f"pass^{k}") for k in (1, 2, 3, 4)] == ["0.700", "0.517", "0.400", "0.300"]
    assert (_figure(page, "cost"), _exact(page, "cost")) == ("$0.8000", "$0.80000000 exactly")
    expect(page.locator("td.outcome .cell")).to_have_count(40)
    page.click("th >> text=Pass rate")
    page.wait_for_load_state("networkidle")
    first = page.locator("table.grid tbody tr").first
    expect(first).to_contain_text("0.250")  # task 8 and 17 pass one trial in four
    screenshot(page, "06-run-grid-sorted")
    assert problems.seen == [], problems.seen

    # Compare two runs, picked on the page.
    _visit(page, problems, f"{marina_url}/reports/compare/", "07-compare-empty")
    page.check("input[name=mode][value=runs]")
    page.select_option("select[name=run_a]", str(run_a.pk))
    page.select_option("select[name=run_b]", str(run_b.pk))
    page.click("form.compare-form button[type=submit]")
    page.wait_for_load_state("networkidle")
    screenshot(page, "08-compare-runs")
    expected = compare_runs(run_a, run_b)
    assert _figure(page, "diff_pass1") == f"{expected.diff_pass1:+.3f}"
    assert _figure(page, "mcnemar_p") == f"{expected.mcnemar_p:.4f}"
    assert _figure(page, "shared_items") == str(expected.shared_items)
    # The smallest detectable difference and what the interval says in words (issue 46).
    mde = expected.smallest_detectable
    assert _figure(page, "smallest_detectable") == ("n/a" if mde is None else f"{mde:.3f}")
    expect(page.locator('[data-figure="verdict"]')).to_contain_text(expected.verdict)
    expect(page.locator("svg.chart g.series")).to_have_count(2)
    assert problems.seen == [], problems.seen

    # ... and two groups.
    page.check("input[name=mode][value=groups]")
    page.select_option("select[name=group_a]", "baseline")
    page.select_option("select[name=group_b]", "verify")
    page.click("form.compare-form button[type=submit]")
    page.wait_for_load_state("networkidle")
    screenshot(page, "09-compare-groups")
    expected = compare_groups("baseline", "verify")
    assert _figure(page, "diff_pass1") == f"{expected.diff_pass1:+.3f}"
    expect(page.locator("body")).to_contain_text("two-stage")
    assert problems.seen == [], problems.seen

    # Spend: chart, totals and the CSV download.
    _visit(page, problems, f"{marina_url}/reports/spend/", "10-spend")
    totals = spend_totals(since=utc_today() - timedelta(days=13), until=utc_today())
    assert (_figure(page, "total"), _exact(page, "total")) == (money.short(totals.cost_nanousd), f"${totals.cost_nanousd / 1e9:.8f} exactly")
    assert _figure(page, "calls") == str(totals.calls)
    # req-failed reported no cost: a failed call is an error, never an unpriced one (issue 42)
    assert (_figure(page, "unpriced"), _figure(page, "errors")) == ("0", "1")
    expect(page.locator("svg.chart g.bar")).to_have_count(14)
    with page.expect_download() as download_info:
        page.click("text=Download CSV")
    rows = list(csv.DictReader(io.StringIO(download_info.value.path().read_text())))
    assert len(rows) == len(totals.rows)
    assert sum(int(r["calls"]) for r in rows) == totals.calls
    assert problems.seen == [], problems.seen

    # Traces: filter by session, open the formation's span tree.
    _visit(page, problems, f"{marina_url}/reports/traces/", "11-traces")
    expect(page.locator("table.report tbody tr")).to_have_count(Trace.objects.count())
    page.fill("input[name=session]", "sim-17-2")
    page.click("form.filters button[type=submit]")
    page.wait_for_load_state("networkidle")
    expect(page.locator("table.report tbody tr")).to_have_count(1)
    page.click("table.report tbody tr a")
    page.wait_for_load_state("networkidle")
    screenshot(page, "12-trace")
    trace = data["verify_trace"]
    assert isinstance(trace, Trace)
    assert (_figure(page, "cost"), _exact(page, "cost")) == ("$0.0105", f"${trace.cost_nanousd / 1e9:.8f} exactly")
    assert trace.cost_nanousd == 10_500_000
    expect(page.locator("#span-tree tbody tr[data-seq]")).to_have_count(4)
    expect(page.locator("#span-tree")).to_contain_text("cite the baggage rule")
    assert problems.seen == [], problems.seen

    # The admin: runs -> their items, traces -> their spans, spend with totals.
    admin = f"{marina_url}/admin/ledger"
    _visit(page, problems, f"{admin}/benchmarkrun/", "20-admin-runs")
    expect(page.locator("#result_list tbody tr")).to_have_count(3)
    page.locator("#result_list tbody tr", has_text="verify").locator("text=items").click()
    page.wait_for_load_state("networkidle")
    screenshot(page, "21-admin-items")
    expect(page.locator("#result_list tbody tr")).to_have_count(40)
    _visit(page, problems, f"{admin}/trace/", "22-admin-traces")
    _visit(page, problems, f"{admin}/trace/{trace.pk}/change/", "23-admin-trace")
    expect(page.locator("body")).to_contain_text("cite the baggage rule")
    _visit(page, problems, f"{admin}/span/", "24-admin-spans")
    _visit(page, problems, f"{admin}/spenddaily/", "25-admin-spend")
    all_spend = spend_totals()
    expect(page.locator("#spend-totals")).to_contain_text(money.short(all_spend.cost_nanousd))
    exact = page.locator("#spend-totals .money").get_attribute("title")
    assert exact == f"${all_spend.cost_nanousd / 1e9:.8f} exactly"
    assert problems.seen == [], problems.seen
