"""The ledger in the Django admin: listed, linked, filtered, and read-only
where the records are append-only."""
from __future__ import annotations

import re
from datetime import date

import pytest
from django.test import Client
from django.urls import reverse

from ledger.models import BenchmarkItem, Span, SpendDaily, Trace
from tests.ledger.report_builders import record_trace

MODELS = ["benchmarkrun", "benchmarkitem", "trace", "span", "spenddaily"]


@pytest.fixture
def ledger_rows(runs) -> dict[str, object]:
    trace = record_trace(
        request_id="req-verify", model="marina/verify:openrouter/openai/gpt-5.2",
        calls=[("openrouter/openai/gpt-5.2", 1_000_000), ("openrouter/openai/gpt-5.2", 500_000)],
    )  # fmt: skip
    return {"trace": trace, **runs}


@pytest.mark.parametrize("model", MODELS)
def test_every_changelist_opens(admin_client: Client, ledger_rows, model: str) -> None:
    assert admin_client.get(reverse(f"admin:ledger_{model}_changelist")).status_code == 200


def test_admin_needs_a_staff_login(client: Client, db) -> None:
    response = client.get(reverse("admin:ledger_benchmarkrun_changelist"))
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_run_changelist_columns_and_links(admin_client: Client, ledger_rows) -> None:
    run = ledger_rows["oracle"]
    html = admin_client.get(reverse("admin:ledger_benchmarkrun_changelist"), {"group": "arm-a"}).content.decode()
    for text in ["arm-a", "tau2-airline", "0.700", "0.300 (k=4)", 'title="$0.80000000 exactly">$0.8000</span>', "given at import (--cost-usd)"]:
        assert text in html
    assert "openrouter/<wbr>oracle-<wbr>agent" in html  # a long id wraps after its separators only
    items_url = reverse("admin:ledger_benchmarkitem_changelist") + f"?run__id__exact={run.pk}"
    assert items_url in html
    assert reverse("reports:run", args=[run.pk]) in html
    items = admin_client.get(items_url).content.decode()
    assert "40 benchmark items" in items
    searched = admin_client.get(reverse("admin:ledger_benchmarkrun_changelist"), {"q": "arm-a"}).content.decode()
    listed = set(re.findall(r'href="/admin/ledger/benchmarkrun/(\d+)/change/', searched))
    assert listed == {str(run.pk)}


def test_run_group_and_label_are_the_only_editable_fields(admin_client: Client, ledger_rows) -> None:
    run = ledger_rows["oracle"]
    url = reverse("admin:ledger_benchmarkrun_change", args=[run.pk])
    html = admin_client.get(url).content.decode()
    assert set(re.findall(r'<(?:input|textarea|select)[^>]* name="([a-z_]+)"', html)) - {"csrfmiddlewaretoken", "_save", "_continue", "_addanother"} == {"group", "label"}
    response = admin_client.post(url, {"group": "renamed", "label": "v2", "target": "tampered", "mean_reward": "1.0"})
    assert response.status_code == 302
    run.refresh_from_db()
    assert (run.group, run.label, run.target, run.mean_reward) == ("renamed", "v2", "openrouter/oracle-agent", 0.7)
    assert admin_client.get(reverse("admin:ledger_benchmarkrun_add")).status_code == 403


@pytest.mark.parametrize("model", ["benchmarkitem", "trace", "span", "spenddaily"])
def test_append_only_records_are_view_only(admin_client: Client, ledger_rows, model: str) -> None:
    row = {"benchmarkitem": BenchmarkItem, "trace": Trace, "span": Span, "spenddaily": SpendDaily}[model].objects.first()
    change = reverse(f"admin:ledger_{model}_change", args=[row.pk])
    page = admin_client.get(change).content.decode()
    assert 'name="_save"' not in page
    assert admin_client.post(change, {}).status_code == 403
    assert admin_client.get(reverse(f"admin:ledger_{model}_add")).status_code == 403
    assert admin_client.get(reverse(f"admin:ledger_{model}_delete", args=[row.pk])).status_code == 403
    assert type(row).objects.filter(pk=row.pk).exists()


def test_trace_shows_its_spans_inline(admin_client: Client, ledger_rows) -> None:
    trace = ledger_rows["trace"]
    html = admin_client.get(reverse("admin:ledger_trace_change", args=[trace.pk])).content.decode()
    assert html.count("openai/gpt-5.2") >= 2 and "draft" in html and "review" in html
    assert "cite the baggage rule" in html  # the review span's decision
    assert reverse("reports:trace", args=[trace.pk]) in admin_client.get(reverse("admin:ledger_trace_changelist")).content.decode()


def test_spend_changelist_totals_follow_the_filters(admin_client: Client, db) -> None:
    for day, key, cost in [(date(2025, 5, 1), "alice", 1_000_000_000), (date(2025, 5, 1), "ci", 250_000_000), (date(2025, 6, 1), "ci", 50)]:
        SpendDaily.objects.create(day=day, key_name=key, requested_model="m", provider="p", upstream_model="m", calls=2, cost_nanousd=cost)
    url = reverse("admin:ledger_spenddaily_changelist")
    html = admin_client.get(url).content.decode()
    totals = html.split('id="spend-totals"')[1].split("</table>")[0]
    assert "$1.25000005" in totals and "<td>6</td>" in totals
    totals = admin_client.get(url, {"key_name": "ci"}).content.decode().split('id="spend-totals"')[1]
    assert "$0.25000005" in totals.split("</table>")[0]
    totals = admin_client.get(url, {"day__year": "2025", "day__month": "5"}).content.decode().split('id="spend-totals"')[1]
    assert "$1.25000000" in totals.split("</table>")[0]
    assert re.search(r"\?day__month=5&amp;day__year=2025|\?day__year=2025&amp;day__month=5", html)  # the date hierarchy


def test_keys_are_listed_without_their_hash_and_revoked_by_an_action(admin_client: Client, db) -> None:
    from ledger.models import ApiKey
    from passthru.auth import create_key

    secret = create_key("alice")
    digest = ApiKey.objects.get().digest
    url = reverse("admin:ledger_apikey_changelist")
    html = admin_client.get(url).content.decode()
    assert "alice" in html and secret[:14] in html and secret not in html and digest not in html
    html = admin_client.get(reverse("admin:ledger_apikey_change", args=[ApiKey.objects.get().pk])).content.decode()
    assert digest not in html and secret not in html
    response = admin_client.post(url, {"action": "revoke", "_selected_action": [ApiKey.objects.get().pk]}, follow=True)
    assert "Revoked 1 key(s)" in response.content.decode()
    assert ApiKey.objects.get().revoked_at is not None
    assert admin_client.get(reverse("admin:ledger_apikey_add")).status_code == 403
