"""CSV cells that a spreadsheet will not run as formulas (CSV injection).

A model id, key name or provider id is text a caller chose: `=HYPERLINK(...)`
in a cell is run by Excel, LibreOffice and Google Sheets when the export is
opened. OWASP's rule: a cell that starts with = + - @, a tab or a carriage
return gets a leading single quote, which spreadsheets show as text and
display without the quote. Numbers are written as they are.

Hand-written rather than `defusedcsv`: that library leaves cells starting with
a tab or a carriage return as they are, and rewrites `|` inside cells."""
from __future__ import annotations

from typing import Any

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value

