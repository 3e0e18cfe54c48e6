"""The admin over large tables: a page's queries do not grow with the rows,
the count is capped, filters need no scan for their values, search is exact."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from ledger.admin_scale import CappedCountPaginator
from ledger.models import Trace
from tests.ledger.report_builders import record_trace

pytestmark = pytest.mark.django_db(transaction=True)  # record_trace writes through the ledger's writer thread

BIG_TABLES = ["trace", "span", "benchmarkitem", "spenddaily", "benchmarkrun"]


def traces(first: int, count: int, **kwargs: object) -> None:
    for n in range(first, first + count):
        record_trace(request_id=f"req-{n}", model=f"openrouter/vendor/model-{n % 3}", **kwargs)


def queries_for(client: Client, url: str) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return [q["sql"] for q in captured.captured_queries]


@pytest.mark.parametrize("model", BIG_TABLES)
def test_a_changelist_runs_the_same_queries_for_few_rows_and_many(admin_client: Client, runs, model: str) -> None:
    url = reverse(f"admin:ledger_{model}_changelist")
    traces(0, 2)
    few = queries_for(admin_client, url)
    traces(2, 25)
    many = queries_for(admin_client, url)
    assert len(many) == len(few), "\n".join(many)


@pytest.mark.parametrize("model", ["trace", "span", "benchmarkitem"])
def test_big_changelists_ask_no_distinct_values_and_count_at_most_the_cap(admin_client: Client, runs, model: str) -> None:
    traces(0, 3)
    sql = queries_for(admin_client, reverse(f"admin:ledger_{model}_changelist"))
    assert not [q for q in sql if "DISTINCT" in q.upper()], sql
    counts = [q for q in sql if "COUNT(" in q.upper()]
    assert counts and all("LIMIT" in q.upper() for q in counts), counts


def test_the_capped_count_stops_at_the_cap(db, monkeypatch: pytest.MonkeyPatch) -> None:
    traces(0, 7)
    monkeypatch.setattr(CappedCountPaginator, "CAP", 5)
    assert CappedCountPaginator(Trace.objects.all(), 2).count == 5
    assert CappedCountPaginator(Trace.objects.filter(request_id="req-1"), 2).count == 1
    assert CappedCountPaginator(list(range(3)), 2).count == 3


def test_status_filter_and_exact_search(admin_client: Client, db) -> None:
    traces(0, 2)
    traces(2, 1, status="error")
    url = reverse("admin:ledger_trace_changelist")

    def listed(**query: str) -> str:  # the list's text, ids rejoined where the page lets them wrap (<wbr>)
        return admin_client.get(url, query).content.decode().replace("<wbr>", "")

    errors = listed(status="error")
    assert "req-2" in errors and "req-0" not in errors
    found = listed(q="req-1")
    assert "req-1" in found and "req-0" not in found
    assert "req-1" not in listed(q="req-")  # exact, not a substring
