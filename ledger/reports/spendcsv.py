"""The spend CSV: spend_daily's buckets of a range, one line each, cost in
exact dollars (nine decimals: every nano-dollar), text cells neutralised
against formula injection (csvcells).

90 days of a busy team is ~100,000 buckets. Python formats them at ~15 µs a
row (1.4 s for 90,000 on this machine, bench/reports_scale.py); on PostgreSQL
the database writes the CSV itself (`COPY … TO STDOUT WITH (FORMAT csv)`, C
code) and the same rules are written in SQL. The PostgreSQL test pass runs the
CSV tests on that path and compares its cells with Python's, so the two cannot
drift apart unnoticed."""
from __future__ import annotations

import csv
import io
from datetime import date

from django.db import connection, transaction

from kernel import money
from ledger.reports.csvcells import FORMULA_START, safe_cell
from ledger.spend.selectors import spend_rows

COLUMNS = [
    "day", "key_name", "requested_model", "provider", "upstream_model", "calls", "errors",
    "unpriced_calls", "prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens",
]  # fmt: skip
TEXT_COLUMNS = ("key_name", "requested_model", "provider", "upstream_model")
ORDER = "day, key_name, requested_model, provider, upstream_model"  # spend_rows' order too


def spend_csv(since: date, until: date) -> bytes:
    if connection.vendor == "postgresql":
        return _copied(since, until)
    return _written(since, until)


def _written(since: date, until: date) -> bytes:
    buffer = io.StringIO()
    # csv's default \r\n ends lines (RFC 4180): it also makes csv quote a cell holding a lone \r.
    writer = csv.writer(buffer)
    writer.writerow([*COLUMNS, "cost_usd"])
    rows = spend_rows(since=since, until=until, columns=[*COLUMNS, "cost_nanousd"])
    writer.writerows(
        (day, safe_cell(key), safe_cell(model), safe_cell(provider), safe_cell(upstream), *counts, money.exact(cost))
        for day, key, model, provider, upstream, *counts, cost in rows
    )
    return buffer.getvalue().encode()


def _safe_sql(column: str) -> str:
    """safe_cell in SQL: a leading ' before a formula's first character, told by
    ascii(), the first character's code. (A regular expression, ~ '^[-=+...]',
    converts the whole text for every cell: it was a quarter of the 90-day
    CSV's server time, docs/performance.md.) An empty text is NULL, which COPY
    writes as nothing, as Python's csv does (COPY writes an empty text as "").
    Most texts start with a letter, past every formula character (and an empty
    text's ascii() is 0): the first test settles them with one comparison."""
    return (
        f"CASE WHEN ascii({column}) > {_LAST_FORMULA_CODE} THEN {column}"
        f" WHEN ascii({column}) IN ({_FORMULA_CODES}) THEN '''' || {column} ELSE NULLIF({column}, '') END"
    )


_FORMULA_CODES = ", ".join(str(ord(c)) for c in FORMULA_START)
_LAST_FORMULA_CODE = max(ord(c) for c in FORMULA_START)  # @, 64

# money.exact in SQL: numeric is exact, and numeric(38, 9) writes nine decimals.
_EXACT_SQL = "(cost_nanousd::numeric / 1000000000)::numeric(38, 9)"


def _copied(since: date, until: date) -> bytes:
    cells = ", ".join(_safe_sql(c) if c in TEXT_COLUMNS else c for c in COLUMNS)
    header = ",".join([*COLUMNS, "cost_usd"]) + "\n"  # COPY ends lines with \n
    # The range is two dates the form validated; bound as literals because COPY takes no parameters.
    query = (
        f"COPY (SELECT {cells}, {_EXACT_SQL} FROM spend_daily"
        f" WHERE day BETWEEN '{since.isoformat()}' AND '{until.isoformat()}' ORDER BY {ORDER})"
        " TO STDOUT WITH (FORMAT csv)"
    )
    out = io.BytesIO()
    out.write(header.encode())
    with transaction.atomic(), connection.cursor() as django_cursor:
        # COPY writes a date in the session's DateStyle: ISO (YYYY-MM-DD) in this transaction
        # whatever the server's setting, instead of to_char() on every row (~15 % of its time).
        django_cursor.execute("SET LOCAL datestyle TO 'ISO'")
        with connection.connection.cursor() as cursor:  # psycopg 3's COPY, below Django's wrapper
            with cursor.copy(query) as copy:
                for block in copy:
                    out.write(block)
    return out.getvalue()
