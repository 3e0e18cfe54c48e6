"""Bad report filters and hostile values in exports.

- `/reports/spend/?until=0001-01-05` (and spend.csv) was a 500: the default
  range's first day fell before year 1. Bad filters on every filtered page are
  now a 400 with the error shown on the page (in the CSV's case, the body).
- `/reports/spend.csv` wrote a model id beginning `=HYPERLINK(…)` as a cell
  starting with `=`; cells starting with = + - @ tab or CR are neutralised
  with a leading quote (OWASP)."""
from __future__ import annotations

import csv
import io
from datetime import date

import pytest
from django.test import Client

from ledger.models import SpendDaily
from ledger.reports.csvcells import safe_cell

BAD_SPEND_FILTERS = [
    ({"until": "0001-01-05"}, None),  # the probe's 500
    ({"since": "0001-01-01", "until": "0001-01-01"}, None),  # valid, at the calendar's edge
    ({"until": "0001-13-45"}, "to: Enter a valid date."),
    ({"since": "yesterday"}, "From: Enter a valid date."),
    ({"since": "99999-01-01"}, "From: Enter a valid date."),
    ({"since": "2025-02-02", "until": "2025-02-01"}, "The range ends before it starts."),
    ({"since": "0001-01-01", "until": "9999-12-31"}, "Pick at most 366 days."),
]


@pytest.mark.parametrize("query, error", BAD_SPEND_FILTERS)
def test_spend_page_bad_filters_are_400_with_the_error_on_the_page(user_client: Client, query, error) -> None:
    response = user_client.get("/reports/spend/", query)
    html = response.content.decode()
    if error is None:
        assert response.status_code == 200
        assert 'data-figure="total"><span class="money" title="$0.00000000 exactly">$0.00</span>' in html
    else:
        assert response.status_code == 400
        assert 'class="errors" role="alert"' in html and error in html


@pytest.mark.parametrize("query, error", BAD_SPEND_FILTERS)
def test_spend_csv_bad_filters_are_400_with_the_error_as_the_body(user_client: Client, query, error) -> None:
    response = user_client.get("/reports/spend.csv", query)
    if error is None:
        assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    else:
        assert response.status_code == 400
        assert response["Content-Type"] == "text/plain; charset=utf-8"
        assert response.content.decode().splitlines() == [error]


@pytest.mark.parametrize(
    "url, query, error",
    [
        ("/reports/runs/", {"since": "not-a-day"}, "Imported from: Enter a valid date."),
        ("/reports/runs/", {"group": "no-such-group"}, "Select a valid choice."),
        ("/reports/traces/", {"status": "weird"}, "Select a valid choice."),
        ("/reports/traces/", {"model": "a\x00b"}, "Null characters are not allowed."),
    ],
)
def test_list_pages_bad_filters_are_400_with_the_error_on_the_page(user_client: Client, url, query, error) -> None:
    response = user_client.get(url, query)
    assert response.status_code == 400
    html = response.content.decode()
    assert 'class="errors" role="alert"' in html and error in html
    assert "<table" not in html  # no unfiltered table passed off as the filtered one


def test_list_pages_without_filters_still_open(user_client: Client, runs) -> None:
    for url in ("/reports/runs/", "/reports/traces/"):
        assert user_client.get(url).status_code == 200
    assert user_client.get("/reports/runs/", {"group": "arm-a"}).status_code == 200


@pytest.mark.parametrize(
    "text, cell",
    [
        ("=HYPERLINK(\"http://x\",\"y\")", "'=HYPERLINK(\"http://x\",\"y\")"),
        ("+1+1", "'+1+1"),
        ("-2+3", "'-2+3"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\t=1", "'\t=1"),
        ("\r=1", "'\r=1"),
        ("openai/gpt-5.2", "openai/gpt-5.2"),
        ("a=b", "a=b"),
        (7, 7),
    ],
)
def test_safe_cell_follows_owasp(text, cell) -> None:
    assert safe_cell(text) == cell


def test_spend_csv_neutralises_formula_cells(user_client: Client, db) -> None:
    day = date(2025, 3, 4)
    SpendDaily.objects.create(
        day=day, key_name="@evil-key", requested_model='=HYPERLINK("http://attacker.example","x")',
        provider="+provider", upstream_model="-upstream", calls=1, cost_nanousd=5,
    )  # fmt: skip
    response = user_client.get("/reports/spend.csv", {"since": "2025-03-04", "until": "2025-03-04"})
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[1][:5] == ["2025-03-04", "'@evil-key", "'=HYPERLINK(\"http://attacker.example\",\"x\")", "'+provider", "'-upstream"]
    assert rows[1][-1] == "0.000000005"
    assert not any(cell.startswith(("=", "+", "-", "@", "\t", "\r")) for row in rows for cell in row)
