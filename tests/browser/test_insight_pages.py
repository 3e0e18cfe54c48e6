"""The pages that show what an arm did, in Chromium, on `manage.py demo`'s data:
the cost–reward frontier (its points and figures as /api/frontier gives them),
the compare page's per-task link to two trajectories side by side (turns,
interventions, costs as /api/trajectories gives them), and the demo's running
experiment (progress per arm, the INVALID warning, as /api/experiments/{id}/progress)."""
from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from kernel import money
from ledger import demo, demo_arms
from ledger.models import BenchmarkRun, Experiment
from tests.browser.conftest import ADMIN_PASSWORD, PageProblems, screenshot

pytestmark = pytest.mark.browser


def _login(page: Page, url: str) -> None:
    page.goto(url)
    page.fill("#id_username", "admin")
    page.fill("#id_password", ADMIN_PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(url)


def _api(page: Page, path: str) -> dict:
    """The read API through the browser's own staff session."""
    response = page.request.get(path)
    assert response.status == 200, response.text()
    return json.loads(response.text())


def test_frontier_trajectories_and_a_live_experiment(marina_url: str, page) -> None:
    page, problems = page
    problems: PageProblems
    demo.load_demo(now=datetime.now(UTC))
    User.objects.create_superuser("admin", "admin@example.invalid", ADMIN_PASSWORD)

    # 1. The frontier: every airline run a point, the unpriced arm's cost unknown, the same figures as the API.
    _login(page, f"{marina_url}/reports/frontier/")
    page.wait_for_load_state("networkidle")
    screenshot(page, "50-frontier")
    api = _api(page, f"{marina_url}/api/frontier")
    rows = page.locator("#frontier tbody tr")
    expect(rows).to_have_count(api["shown"])
    expect(page.locator("svg.chart g.dot")).to_have_count(api["shown"])
    expect(page.locator("svg.chart path.frontier")).to_have_count(1)
    for point in api["points"]:
        row = page.locator(f'#frontier tr[data-key="{point["key"]}"]')
        # Shown in cents, exact on hover (the API's figure); an unknown cost says so, never $0.
        if point["cost_per_simulation_usd"] is None:
            expect(row.locator('[data-figure="cost"]')).to_have_text("— unknown")
        else:
            exact = point["cost_per_simulation_usd"]
            expect(row.locator('[data-figure="cost"]')).to_have_text(money.short(Decimal(exact)))
            expect(row.locator('[data-figure="cost"] .money')).to_have_attribute("title", f"${exact} exactly")
        expect(row.locator('[data-figure="pass"]')).to_have_text(f"{point['pass_hat_k']:.3f}")
        expect(row).to_have_attribute("data-frontier", "true" if point["on_frontier"] else "false")
    local = page.locator("#frontier tr", has_text="demo/gamma-local")
    expect(local.locator('[data-figure="cost"]')).to_have_text("— unknown")
    # Neighbouring frontier points: told apart or not, as /api/frontier says (issue 46).
    pairs = page.locator("#frontier-neighbours tbody tr")
    expect(pairs).to_have_count(len(api["neighbours"]))
    for pair in api["neighbours"]:
        row = page.locator(f'#frontier-neighbours tr[data-pair="{pair["cheaper"]} {pair["dearer"]}"]')
        expect(row).to_have_attribute("data-distinguishable", "true" if pair["distinguishable"] else "false")
    # filters: a point per group, pass^2
    page.select_option("#id_by", "group")
    page.fill("#id_k", "2")
    page.click("form.filters button[type=submit]")
    page.wait_for_load_state("networkidle")
    grouped = _api(page, f"{marina_url}/api/frontier?by=group&k=2")
    expect(page.locator("#frontier tbody tr")).to_have_count(grouped["shown"])
    expect(page.locator("#frontier thead")).to_contain_text("pass^2")
    assert problems.seen == [], problems.seen

    # 3. From compare's per-task table, one click to the two trajectories.
    plain = BenchmarkRun.objects.get(source_name="demo/airline-1.ledger.json")
    verify = BenchmarkRun.objects.get(source_name="demo/airline-1-verify.ledger.json")
    page.goto(f"{marina_url}/reports/compare/?mode=runs&run_a={plain.pk}&run_b={verify.pk}")
    row = page.locator("table tr", has=page.locator("td", has_text="23")).filter(has=page.locator("a.side-by-side"))
    row.locator("a.side-by-side").first.click()
    page.wait_for_url(f"{marina_url}/reports/trajectories/?a={plain.pk}&b={verify.pk}&task=23")
    page.wait_for_load_state("networkidle")
    screenshot(page, "51-trajectories")
    trajectory = _api(page, f"{marina_url}/api/trajectories?a={plain.pk}&b={verify.pk}&task=23")
    expect(page.locator("h1")).to_have_text("Why A failed where B passed")
    expect(page.locator("#side-a [data-figure=outcome]")).to_have_text("failed")
    expect(page.locator("#side-b [data-figure=outcome]")).to_have_text("passed")
    turns = page.locator("#turns tbody tr")
    expect(turns).to_have_count(max(len(trajectory["a"]["turns"]), len(trajectory["b"]["turns"])))
    for n, (a, b) in enumerate(zip(trajectory["a"]["turns"], trajectory["b"]["turns"])):
        cells = turns.nth(n).locator("td.turn")
        for cell, turn in ((cells.nth(0), a), (cells.nth(1), b)):  # cents, the API's exact figure on hover
            expect(cell.locator('[data-figure="turn-cost"]')).to_have_text(money.short(Decimal(turn["cost_usd"])))
            expect(cell.locator('[data-figure="turn-cost"] .money')).to_have_attribute("title", f"${turn['cost_usd']} exactly")
    expect(page.locator('#turns [data-kind="revised"]')).to_have_count(1)
    expect(page.locator('#turns [data-kind="review"]').first).to_be_visible()
    expect(page.locator("#turns")).to_contain_text('"cabin": "economy"')
    expect(page.locator("#breakdown-a")).to_contain_text("no match")
    expect(page.locator("#breakdown-b")).to_contain_text("match")
    # a skeleton (no bodies stored) for another task, with the nudge and the argcheck judgement of the mini arm
    mini = BenchmarkRun.objects.get(source_name="demo/airline-mini.ledger.json")
    page.goto(f"{marina_url}/reports/trajectories/?a={plain.pk}&b={mini.pk}&task=7")
    page.wait_for_load_state("networkidle")
    screenshot(page, "52-trajectories-skeleton")
    expect(page.locator("#turns .skeleton").first).to_contain_text("no body stored")
    expect(page.locator('#turns [data-kind="argcheck"]').first).to_be_visible()
    assert problems.seen == [], problems.seen

    # 2. The running experiment: progress per arm, the INVALID warning, the API's figures; it refreshes by itself.
    experiment = Experiment.objects.get(name=demo_arms.EXPERIMENT)
    page.goto(f"{marina_url}/reports/experiments/{experiment.pk}/")
    page.wait_for_load_state("networkidle")
    screenshot(page, "53-experiment-live")
    progress = _api(page, f"{marina_url}/api/experiments/{experiment.pk}/progress")
    for arm in progress["arms"]:
        row = page.locator(f'#arm-progress tr[data-arm="{arm["arm"]}"]')
        expect(row.locator('[data-figure="finished"]')).to_have_text(f"{arm['finished']} / {arm['planned']}")
        expect(row.locator('[data-figure="pass1"]')).to_have_text(f"{arm['pass_hat_1']:.3f}")
        expect(row.locator('[data-figure="infra"]')).to_have_text(str(arm["infra_errors"]))
        expect(row.locator('[data-figure="arm-spent"]')).to_have_text(money.short(Decimal(arm["spent_usd"])))
        expect(row.locator('[data-figure="arm-spent"] .money')).to_have_attribute("title", f"${arm['spent_usd']} exactly")
        assert arm["running"] and arm["eta_seconds"] and arm["started_in_traces"] > arm["finished"]
    expect(page.locator(".invalid-warning")).to_have_text(
        "Arm verify: 1 infrastructure error(s) so far: this run will be INVALID; fix the cause."
    )
    expect(page.locator('meta[http-equiv="refresh"]')).to_have_count(1)
    assert problems.seen == [], problems.seen
