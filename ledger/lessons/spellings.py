"""Normal forms for the leak guard (ledger/lessons/leakguard.py): one value
written many ways compares as one. Pure functions.

- **dates**: `2024-05-26`, `05/26`, `26/05/2024`, `May 26`, `May 26th`,
  `26 May`, `26th of May`, `the 26th of May, 2024` all read as (5, 26); a
  slashed date whose order is ambiguous (`05/06`) reads both ways;
- **numbers in words**: `three hundred forty-eight`, `three hundred and
  forty eight`, `twelve thousand five hundred` read as 348 and 12500 (English
  cardinals below a billion; `a hundred` counts; ordinals and fractions do not);
- **ids without separators**: `K1N-W8N`, `K1N W8N`, `k1n_w8n` and `K1NW8N`
  all compact to `k1nw8n`;
- **codes**: all-caps words of three or more letters (`ATL`, `PHL`), as written.

A small hand-written parser rather than a dependency: the guard needs English
cardinals only, and the maintained number-word packages bring locales, currency
and ordinal handling it has no use for."""
from __future__ import annotations

import re
from collections.abc import Iterable

MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december")  # fmt: skip
_MONTH = (
    r"(?P<month>january|february|march|april|may|june|july|august|september|october|november|december"
    r"|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)\.?(?![a-z])"
)
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_DATE_FORMS = [
    re.compile(r"\b(?P<year>\d{4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})\b"),
    re.compile(rf"\b{_MONTH}\s+(?:the\s+)?{_DAY}\b", re.IGNORECASE),  # May 26, May the 26th
    re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}", re.IGNORECASE),  # 26 May, 26th of May
    re.compile(r"\b(?P<a>\d{1,2})/(?P<b>\d{1,2})(?:/\d{2,4})?\b|\b(?P<c>\d{1,2})\.(?P<e>\d{1,2})\.\d{4}\b"),  # 05/26, 26.05.2024
]
_CODE = re.compile(r"(?<![A-Za-z0-9])[A-Z]{3,}(?![A-Za-z0-9])")
_ALNUM = re.compile(r"[^a-z0-9]")
_TOKEN = re.compile(r"[A-Za-z0-9]+")


def _month(name: str) -> int:
    return next(i for i, m in enumerate(MONTHS, start=1) if m.startswith(name.lower()[:3]))


def _valid(month: int, day: int) -> bool:
    return 1 <= month <= 12 and 1 <= day <= 31


def dates(text: str) -> set[tuple[int, int]]:
    """Every (month, day) the text names, however it is spelled."""
    found: set[tuple[int, int]] = set()
    iso, month_day, day_month, slashed = _DATE_FORMS
    for m in iso.finditer(text):
        found.add((int(m["m"]), int(m["d"])))
    for form in (month_day, day_month):
        for m in form.finditer(text):
            found.add((_month(m["month"]), int(m["day"])))
    for m in slashed.finditer(text):
        a, b = int(m["a"] or m["c"]), int(m["b"] or m["e"])
        found |= {(a, b), (b, a)}  # 05/26 is May 26; 26/05 too; 05/06 may be either
    return {d for d in found if _valid(*d)}


_UNITS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen".split()
)}  # fmt: skip
_TENS = {w: 10 * i for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), start=2)}
_SCALES = {"thousand": 1_000, "million": 1_000_000}
_NUMBER_WORD = re.compile(r"[a-z]+")


def numbers_in_words(text: str) -> set[int]:
    """The cardinals the text writes in words ("three hundred forty-eight" -> 348)."""
    found: set[int] = set()
    total = group = 0
    in_number = False

    def close() -> None:
        nonlocal total, group, in_number
        if in_number:
            found.add(total + group)
        total = group = 0
        in_number = False

    for word in _NUMBER_WORD.findall(text.lower().replace("-", " ")):
        if word in _UNITS:
            group += _UNITS[word]
        elif word in _TENS:
            group += _TENS[word]
        elif word == "hundred" and (in_number or group == 0):
            group = (group or 1) * 100
        elif word in _SCALES and (in_number or group):
            total += (group or 1) * _SCALES[word]
            group = 0
        elif word == "and" and in_number:
            continue
        elif word == "a" and not in_number:
            continue  # "a hundred", "a thousand"
        else:
            close()
            continue
        in_number = True
    close()
    return found


def compact(value: str) -> str:
    """An id without its separators, lower-cased ("K1N-W8N" -> "k1nw8n")."""
    return _ALNUM.sub("", value.lower())


def compact_windows(text: str, width: int = 3) -> set[str]:
    """Each run of 1 … `width` adjacent alphanumeric pieces, compacted: "K1N-W8N", "K1N W8N" and
    "K1N_W8N" all hold "k1nw8n"."""
    pieces = [p.lower() for p in _TOKEN.findall(text)]
    return {"".join(pieces[i : i + n]) for n in range(1, width + 1) for i in range(len(pieces) - n + 1)}


def codes(text: str) -> set[str]:
    """The all-caps words of three or more letters ("ATL", "PHL")."""
    return set(_CODE.findall(text))


def is_identifier(compacted: str) -> bool:
    """A compacted value that is an id: a letter and a digit, at least four characters."""
    return len(compacted) >= 4 and any(c.isdigit() for c in compacted) and any(c.isalpha() for c in compacted)


def whole_numbers(values: Iterable[str]) -> set[int]:
    """The values that are whole numbers ("348", "348.0")."""
    out = set()
    for value in values:
        try:
            number = float(value.replace(",", ""))
        except ValueError:
            continue
        if number.is_integer():
            out.add(int(number))
    return out
