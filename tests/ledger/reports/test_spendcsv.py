"""The spend CSV's two writers (Python's csv on SQLite, PostgreSQL's COPY)
give the same cells, neutralised alike, with exact dollars."""
from __future__ import annotations

import csv
import io
from datetime import date, timedelta

import pytest
from django.db import connection

from ledger.models import SpendDaily
from ledger.reports import spendcsv

DAY = date(2025, 3, 4)
TRICKY = ["=HYPERLINK(\"x\")", "+1", "-2", "@sum", "\tTab", "\rCR", "plain, with comma", 'quote " inside', "", "0.5 digits", ",comma"]


def buckets() -> None:
    for n, text in enumerate(TRICKY):
        SpendDaily.objects.create(
            day=DAY + timedelta(days=n % 2), key_name=text, requested_model=f"m{n}/{text}", provider="p",
            upstream_model=text or "u", calls=n, errors=n % 3, cost_nanousd=1_234_567_891 * n + 5,
        )  # fmt: skip
    SpendDaily.objects.create(day=DAY + timedelta(days=9), key_name="k", requested_model="outside", provider="p",
                              upstream_model="u", cost_nanousd=1)  # fmt: skip


def rows(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode(), newline="")))


def test_the_csv_neutralises_formulas_and_keeps_every_nano_dollar(db) -> None:
    buckets()
    found = rows(spendcsv.spend_csv(DAY, DAY + timedelta(days=1)))
    assert found[0] == [*spendcsv.COLUMNS, "cost_usd"]
    body = found[1:]
    assert len(body) == len(TRICKY)  # the bucket outside the range is not there
    keys = {r[1] for r in body}
    assert keys == {"'=HYPERLINK(\"x\")", "'+1", "'-2", "'@sum", "'\tTab", "'\rCR", "plain, with comma", 'quote " inside', "",
                    "0.5 digits", ",comma"}  # fmt: skip
    by_key = {r[1]: r for r in body}
    assert by_key["'+1"][-1] == "1.234567896"  # n=1: 1_234_567_891 + 5 nano-dollars
    assert by_key["plain, with comma"][-1] == f"{(1_234_567_891 * 6 + 5) // 10**9}.{(1_234_567_891 * 6 + 5) % 10**9:09d}"
    assert [r[0] for r in body] == sorted(r[0] for r in body)  # ordered by day first


@pytest.mark.skipif(connection.vendor != "postgresql", reason="COPY is PostgreSQL's; the PostgreSQL pass runs this")
def test_postgres_copy_writes_what_python_writes(db) -> None:
    buckets()
    since, until = DAY, DAY + timedelta(days=9)
    # Cell for cell (the quoting may differ: COPY also quotes a cell holding a carriage return).
    assert rows(spendcsv._copied(since, until)) == rows(spendcsv._written(since, until))


@pytest.mark.skipif(connection.vendor != "postgresql", reason="COPY is PostgreSQL's; the PostgreSQL pass runs this")
def test_postgres_copy_writes_iso_days_whatever_the_sessions_datestyle(transactional_db) -> None:
    # COPY writes `day` in the session's DateStyle; _copied sets ISO for its own transaction only.
    buckets()
    since, until = DAY, DAY + timedelta(days=9)
    expected = rows(spendcsv._written(since, until))
    with connection.cursor() as cursor:
        cursor.execute("SET datestyle TO 'SQL, DMY'")  # days as 04/03/2025
        try:
            body = rows(spendcsv._copied(since, until))
            cursor.execute("SHOW datestyle")
            assert cursor.fetchone()[0] == "SQL, DMY"
        finally:
            cursor.execute("SET datestyle TO 'ISO, MDY'")
    assert body == expected and body[1][0] == "2025-03-04"
