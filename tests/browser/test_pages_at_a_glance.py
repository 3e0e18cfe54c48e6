"""Pages a person reads at a glance, in Chromium: the admin is Marina's and its
changelists fit 1400 px with grouped totals; the trace page says decisions in
words; the compare page tells A from B and shows only the chosen picker; the
overview shows cents with the exact figure on hover, and the run grid explains
its "?" marks."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from ledger.models import BenchmarkRun, Span, SpendDaily, Trace
from ledger.spend.selectors import spend_totals, utc_today
from tests.browser.conftest import ADMIN_PASSWORD, PageProblems, screenshot
from tests.browser.test_report_pages import _import, _ledger
from tests.ledger.report_builders import record_trace

pytestmark = pytest.mark.browser
CHANGELISTS = ["benchmarkrun", "benchmarkitem", "trace", "span", "spenddaily", "apikey", "experiment", "lesson"]


def _log_in(page: Page, marina_url: str) -> None:
    page.goto(f"{marina_url}/admin/login/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", ADMIN_PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_load_state("networkidle")


def _open(page: Page, problems: PageProblems, url: str, shot: str) -> None:
    page.goto(url)
    page.wait_for_load_state("networkidle")
    screenshot(page, shot)
    assert problems.seen == [], f"{url}: {problems.seen}"


def test_the_admin_is_marinas_fits_1400_px_and_groups_its_totals(marina_url: str, page) -> None:
    page, problems = page
    _ledger()
    # A big day, so the totals need separators.
    SpendDaily.objects.create(day=utc_today() - timedelta(days=2), key_name="bulk", requested_model="openrouter/x",
                              provider="openrouter", upstream_model="x", calls=1_234_567, prompt_tokens=98_765_432,
                              completion_tokens=1_000, cost_nanousd=1_234_567_890_123)  # fmt: skip
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(f"{marina_url}/admin/login/")
    expect(page.locator("#site-name")).to_contain_text("Marina")
    assert "Django" not in page.locator("#header").inner_text() and "Django" not in page.title()
    _log_in(page, marina_url)
    for name in CHANGELISTS:
        _open(page, problems, f"{marina_url}/admin/ledger/{name}/", f"30-admin-{name}-1400")
        assert "Django" not in page.locator("#header").inner_text() and "Django" not in page.title()
        overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"{name}: the page is {overflow} px wider than the window"
        right = page.evaluate(
            "(() => { const t = document.querySelector('#result_list'); return t ? t.getBoundingClientRect().right : 0 })()"
        )
        assert right <= 1400, f"{name}: the list's right-hand columns are cut off ({right} px)"
    _open(page, problems, f"{marina_url}/admin/ledger/spenddaily/", "31-admin-spend-totals")
    totals = page.locator("#spend-totals")
    all_spend = spend_totals()
    expect(totals).to_contain_text(f"{all_spend.calls:,}")
    expect(totals).to_contain_text(f"{all_spend.prompt_tokens:,}")
    expect(totals).to_contain_text("$1,234.")


def test_the_trace_page_says_decisions_in_words(marina_url: str, page) -> None:
    page, problems = page
    data = _ledger()
    trace = data["verify_trace"]
    assert isinstance(trace, Trace)
    first = Span.objects.filter(trace=trace).order_by("seq").first()
    assert first is not None
    Span.objects.filter(pk=first.pk).update(
        detail={"rounds": [{"round": 1, "verdict": "unreadable"}], "held": False, "conflicts": [], "label": "revised"}
    )
    _log_in(page, marina_url)
    _open(page, problems, f"{marina_url}/reports/traces/{trace.pk}/", "32-trace-decisions")
    decisions = "\n".join(page.locator("dl.decisions").all_inner_texts())
    for python in ("{'", "[{", "False", "[]"):
        assert python not in decisions, decisions
    assert "round 1: verdict unreadable" in decisions and "no" in decisions and "none" in decisions


def test_the_compare_page_tells_a_from_b_and_shows_one_picker(marina_url: str, page) -> None:
    page, problems = page
    User.objects.create_superuser("admin", "admin@example.invalid", ADMIN_PASSWORD)
    note = "demo data (manage.py demo --remove deletes it)"
    a = _import("airline-oracle", target="demo/alpha-large", group="demo:airline-plain", label=note, cost_usd=1)
    b = _import("airline-skipped-samples", target="marina/verify:demo/alpha-large", group="demo:airline-verify", label=note, cost_usd=1)
    _log_in(page, marina_url)
    _open(page, problems, f"{marina_url}/reports/compare/", "33-compare-empty")
    page.check("input[name=mode][value=runs]")
    expect(page.locator("fieldset.pick-runs")).to_be_visible()
    expect(page.locator("fieldset.pick-groups")).to_be_hidden()
    page.check("input[name=mode][value=groups]")
    expect(page.locator("fieldset.pick-groups")).to_be_visible()
    expect(page.locator("fieldset.pick-runs")).to_be_hidden()
    _open(page, problems, f"{marina_url}/reports/compare/?mode=runs&run_a={a.pk}&run_b={b.pk}", "34-compare-same-note")
    side_a, side_b = page.locator("#side-a b").inner_text(), page.locator("#side-b b").inner_text()
    assert side_a != side_b
    assert f"#{a.pk}" in side_a and "demo/alpha-large" in side_a and "demo:airline-plain" in side_a
    assert f"#{b.pk}" in side_b and "marina/verify:demo/alpha-large" in side_b
    legend = page.locator("svg.chart").first.text_content() or ""
    assert f"#{a.pk}" in legend and f"#{b.pk}" in legend, legend
    expect(page.locator("fieldset.pick-groups")).to_be_hidden()


def test_the_overview_shows_cents_exact_on_hover_and_the_grid_a_legend(marina_url: str, page) -> None:
    page, problems = page
    data = _ledger()
    record_trace(request_id="big", model="openrouter/openai/gpt-5.2", key="alice",
                 calls=[("openrouter/openai/gpt-5.2", 8_179_997_750)])  # fmt: skip
    _log_in(page, marina_url)
    _open(page, problems, f"{marina_url}/reports/", "35-overview-cents")
    today = spend_totals(since=utc_today(), until=utc_today()).cost_nanousd
    figure = page.locator('[data-figure="spend_today"]')
    exact = f"${today / 1e9:.8f}"
    assert figure.inner_text().strip() == f"${today / 1e9:,.2f}" and len(figure.inner_text().split(".")[1]) == 2
    assert figure.locator(".money").get_attribute("title") == f"{exact} exactly"
    yesterday = spend_totals(since=utc_today() - timedelta(days=1), until=utc_today() - timedelta(days=1)).cost_nanousd
    expect(page.locator('[data-figure="spend_yesterday"]')).to_have_text(f"${yesterday / 1e9:.4f}")  # under a dollar
    run = data["a"]
    assert isinstance(run, BenchmarkRun)
    _open(page, problems, f"{marina_url}/reports/runs/{run.pk}/", "36-run-grid-legend")
    expect(page.locator("#legend-unlinked")).to_be_visible()
    expect(page.locator("#legend-unlinked")).to_contain_text("no trace")
