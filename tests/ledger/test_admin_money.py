"""The admin shows money and other figures as the reports do: a first-time
user saw τ²'s per-item costs and durations as raw binary floats
(597.0618970000032) in the item pages, and pass^k as 0.5166666666666667."""
from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse

from ledger.models import BenchmarkItem, BenchmarkRun, Span, SpendDaily, Trace
from tests.ledger.report_builders import record_trace

# A number with more fraction digits than any figure Marina shows (8 for dollars).
RAW_FLOAT = re.compile(r"(?<![\w.$])\d+\.\d{9,}")


@pytest.fixture
def costly_item(runs) -> BenchmarkItem:
    item = BenchmarkItem.objects.filter(run=runs["oracle"]).order_by("-pk").first()  # the newest: the first the changelist shows
    assert item is not None
    item.agent_cost_usd, item.user_cost_usd, item.duration_s = 597.0618970000032, 0.1 + 0.2, 12.345678901234
    item.save()
    record_trace(request_id="req-1", model="openrouter/openai/gpt-5.2", calls=[("openrouter/openai/gpt-5.2", 1_234_567)])
    return item


def admin_pages() -> list[str]:
    pages = []
    for model in (BenchmarkRun, BenchmarkItem, Trace, Span, SpendDaily):
        name = model._meta.model_name
        pages.append(reverse(f"admin:ledger_{name}_changelist"))
        pages += [reverse(f"admin:ledger_{name}_change", args=[pk]) for pk in model.objects.values_list("pk", flat=True)[:3]]
    return pages


def test_no_admin_page_shows_a_raw_float(admin_client: Client, costly_item) -> None:
    for url in admin_pages():
        response = admin_client.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert RAW_FLOAT.findall(html) == [], url


def test_item_pages_show_dollars_as_the_reports_do(admin_client: Client, costly_item) -> None:
    listed = admin_client.get(reverse("admin:ledger_benchmarkitem_changelist")).content.decode()
    assert "$597.06189700" in listed and "$0.30000000" in listed and "12.3 s" in listed
    page = admin_client.get(reverse("admin:ledger_benchmarkitem_change", args=[costly_item.pk])).content.decode()
    assert "$597.06189700" in page and "$0.30000000" in page and "12.3 s" in page
    assert "597.0618970000032" not in page


def test_run_page_shows_pass_hat_k_rounded(admin_client: Client, runs) -> None:
    page = admin_client.get(reverse("admin:ledger_benchmarkrun_change", args=[runs["oracle"].pk])).content.decode()
    assert "0.700, 0.517, 0.400, 0.300" in page and "0.5166666666666667" not in page
