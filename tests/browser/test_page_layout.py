"""Pages people read, at 1,400 px and at a phone's 390 px, on `manage.py demo`'s data, in
Chromium: no page wider than its window (a wide table scrolls in its own box), no table cell
that breaks inside a number, no amount in eight decimals outside a tooltip (the CSV and the
API keep them); and a staff user without rights, or with only the runs permission, sees the
site's layout and only links they may open. Screenshots of each: artifacts/screenshots/6x-*."""
from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import Permission, User
from playwright.sync_api import Browser, Page

from ledger import demo, demo_arms
from ledger.models import BenchmarkRun, Experiment, Trace
from tests.browser.conftest import ADMIN_PASSWORD, PageProblems, screenshot

pytestmark = pytest.mark.browser
WIDTHS = (1400, 390)

# For each cell: every number in its text (amounts, counts, rates, dates, times) laid out on
# one line. A text node's Range gives one client rect per line box the number occupies.
BROKEN_NUMBERS = r"""
() => {
  const broken = [];
  const number = /(?<![\w.])[-+−]?[$]?\d(?:[\d,.:]*\d)?/g;  // 1,234.57, $0.0073, -0.125, 02:17
  for (const cell of document.querySelectorAll('table td, table th')) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const match of node.data.matchAll(number)) {
        const range = document.createRange();
        range.setStart(node, match.index);
        range.setEnd(node, match.index + match[0].length);
        const tops = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
        if (tops.size > 1) broken.push(match[0] + ' in ' + cell.innerText.trim().slice(0, 60));
      }
    }
  }
  return broken;
}
"""
EIGHT_DECIMALS = re.compile(r"\$\d[\d,]*\.\d{8}")


def _check(page: Page, problems: PageProblems, url: str, shot: str) -> None:
    """Open `url`, take its screenshot and check the three rules of a page people read."""
    response = page.goto(url)
    assert response is not None and response.status == 200, f"{url}: {response and response.status}"
    page.wait_for_load_state("networkidle")
    screenshot(page, shot)
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"{shot}: the page is {overflow} px wider than its window"
    assert page.evaluate(BROKEN_NUMBERS) == [], f"{shot}: a number breaks across lines"
    # What a person reads (innerText: no title attribute, no SVG <title>) holds no 8-decimal amount.
    shown = page.evaluate("document.body.innerText")
    assert not EIGHT_DECIMALS.findall(shown), f"{shot}: {EIGHT_DECIMALS.findall(shown)[:3]}"
    assert problems.seen == [], f"{url}: {problems.seen}"


def _session(browser: Browser, base: str, username: str, width: int) -> tuple[Page, PageProblems]:
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    problems = PageProblems(page)
    page.goto(f"{base}/admin/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", ADMIN_PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_load_state("networkidle")
    return page, problems


def test_pages_fit_their_window_and_show_money_in_cents(marina_url: str, browser: Browser) -> None:
    demo.load_demo(now=datetime.now(UTC))
    User.objects.create_superuser("admin", "admin@example.invalid", ADMIN_PASSWORD)
    plain = BenchmarkRun.objects.get(source_name="demo/airline-1.ledger.json")
    verify = BenchmarkRun.objects.get(source_name="demo/airline-1-verify.ledger.json")
    experiment = Experiment.objects.get(name=demo_arms.EXPERIMENT)
    trace = Trace.objects.filter(route="verify").order_by("-started_at").first()
    assert trace is not None
    pages = {
        "overview": "/reports/",
        "run": f"/reports/runs/{verify.pk}/",
        "compare": f"/reports/compare/?mode=runs&run_a={plain.pk}&run_b={verify.pk}",
        "frontier": "/reports/frontier/",
        "experiment": f"/reports/experiments/{experiment.pk}/",
        "traces": "/reports/traces/",
        "trace": f"/reports/traces/{trace.pk}/",
        "admin-runs": "/admin/ledger/benchmarkrun/",
        "admin-traces": "/admin/ledger/trace/",
        "admin-items": "/admin/ledger/benchmarkitem/",
        "admin-trace": f"/admin/ledger/trace/{trace.pk}/change/",
    }
    for width in WIDTHS:
        page, problems = _session(browser, marina_url, "admin", width)
        for name, path in pages.items():
            _check(page, problems, f"{marina_url}{path}", f"60-{name}-{width}")
        if width == 390:  # the header wraps: the dark bar spans the window, the nav stays inside it
            page.goto(f"{marina_url}/reports/")
            header = page.evaluate("(() => { const r = document.querySelector('header.top').getBoundingClientRect(); return [r.width, r.right] })()")
            assert header == [390, 390]
            nav_right = page.evaluate("Math.max(...[...document.querySelectorAll('header.top nav a')].map(a => a.getBoundingClientRect().right))")
            assert nav_right <= 390
        page.context.close()


def _reader(name: str, *codenames: str) -> None:
    user = User.objects.create_user(name, password=ADMIN_PASSWORD, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="ledger", codename__in=codenames))


def _links_open(page: Page, base: str) -> list[str]:
    """Every same-site link on the page (not logout, not the CSV): those that do not open."""
    hrefs = page.evaluate("[...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href'))")
    refused = []
    for href in sorted({h.split("#")[0] for h in hrefs if h.startswith("/") and not h.startswith("/static/")}):
        status = page.request.get(f"{base}{href}").status
        if status >= 400:
            refused.append(f"{href}: {status}")
    return refused


def test_staff_without_rights_and_runs_only_see_the_layout_and_only_links_they_may_open(
    marina_url: str, browser: Browser
) -> None:
    demo.load_demo(now=datetime.now(UTC))
    _reader("no-rights")
    _reader("runs-only", "view_benchmarkrun")
    plain = BenchmarkRun.objects.get(source_name="demo/airline-1.ledger.json")
    verify = BenchmarkRun.objects.get(source_name="demo/airline-1-verify.ledger.json")
    for width in WIDTHS:
        # Without rights: `/` is a 403 in the site's layout, saying what to ask for; its links open.
        page, problems = _session(browser, marina_url, "no-rights", width)
        response = page.goto(f"{marina_url}/")
        assert response is not None and response.status == 403
        screenshot(page, f"61-no-rights-root-{width}")
        assert page.locator("header.top nav a").all_inner_texts() == ["Admin"]
        assert "none of the report pages" in page.locator("#reason").inner_text()
        assert _links_open(page, marina_url) == []
        page.goto(f"{marina_url}/reports/spend/")
        assert "ledger.view_spenddaily" in page.locator("#reason").inner_text()
        page.context.close()

        # Runs only: `/` lands on the runs; navigation, run and compare pages link only where they may go.
        page, problems = _session(browser, marina_url, "runs-only", width)
        page.goto(f"{marina_url}/")
        assert page.url == f"{marina_url}/reports/runs/"
        assert page.locator("header.top nav a").all_inner_texts() == ["Runs", "Compare", "Admin"]
        for path, shot in (
            ("/reports/runs/", "runs"),
            (f"/reports/runs/{verify.pk}/", "run"),
            (f"/reports/compare/?mode=runs&run_a={plain.pk}&run_b={verify.pk}", "compare"),
        ):
            _check(page, problems, f"{marina_url}{path}", f"62-runs-only-{shot}-{width}")
            assert _links_open(page, marina_url) == [], path
        assert page.locator("a.side-by-side").count() == 0
        response = page.goto(f"{marina_url}/reports/traces/")
        assert response is not None and response.status == 403
        screenshot(page, f"63-runs-only-403-{width}")
        assert page.locator("header.top nav a").all_inner_texts() == ["Runs", "Compare", "Admin"]
        assert "ledger.view_trace" in page.locator("#reason").inner_text()
        page.context.close()
