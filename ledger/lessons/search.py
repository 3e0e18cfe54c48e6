"""Lexical recall of lessons on the database's own full-text index.

SQLite: an FTS5 table (`ledger_lesson_fts`, porter stemmer) over the rule,
external-content, kept in step with `ledger_lesson` by triggers; ranked by
FTS5's bm25(). PostgreSQL: a generated `search` tsvector column (English
configuration) with a GIN index; ranked by ts_rank. Both are made by
migration 0008_lessons. Why the database and not a BM25 library:
docs/lessons.md.

A query is the words of a text (letters only, 3+ characters, no stop words,
at most 32 distinct), OR-ed: a lesson matches when it shares a word (a stem)
with the request, and ranks by how many, how rare and how often."""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection as default_connection
from django.db.backends.base.base import BaseDatabaseWrapper

MAX_TERMS = 32
CANDIDATES = 16  # ranked matches read per recall; the budget picks from these

_WORD = re.compile(r"[A-Za-z][A-Za-z']*[A-Za-z]")
# Words too common in requests to say what one is about (English function words
# and the filler of customer-service turns).
STOP_WORDS = frozenset(
    """a about above after again all also am an and any are as at be because been before being
    but by can could did do does doing done for from had has have having he her here hers him his
    how i if in into is it its just me more most my no nor not now of off on once only or other our
    out over own same she should so some such than that the their them then there these they this
    those through to too under until up very was we were what when where which while who whom why
    will with would you your yours hello hi please thanks thank want like need help today okay ok
    yes sure could would""".split()
)

def terms(text: str) -> list[str]:
    """The query words of a text: lower-cased, in order, distinct, at most MAX_TERMS."""
    seen: dict[str, None] = {}
    for match in _WORD.finditer(text):
        word = match.group().lower().replace("'", "")
        if len(word) >= 3 and word not in STOP_WORDS:
            seen.setdefault(word, None)
            if len(seen) == MAX_TERMS:
                break
    return list(seen)


@dataclass(frozen=True)
class Match:
    id: int
    rule: str
    domain: str
    trust: str
    benchmark: str
    score: float  # higher is more relevant (comparable within one query only)

    @property
    def trusted(self) -> bool:
        return self.trust == "trusted"


def ranked(
    text: str,
    *,
    domains: Sequence[str],
    exclude_benchmark: str = "",
    limit: int = CANDIDATES,
    connection: BaseDatabaseWrapper | None = None,
) -> list[Match]:
    """Live (not retired) lessons of `domains` sharing a word with `text`, best
    first; lessons of `exclude_benchmark` are left out (measurement requests)."""
    words = terms(text)
    if not words or not domains:
        return []
    conn = connection or default_connection
    marks = ", ".join(["%s"] * len(domains))
    excluding = " AND l.benchmark <> %s" if exclude_benchmark else ""
    if conn.vendor == "sqlite":
        # Quoted, each word is a plain token to FTS5 (no operators, no columns).
        query = " OR ".join(f'"{w}"' for w in words)
        sql = (
            "SELECT l.id, l.rule, l.domain, l.trust, l.benchmark, -bm25(ledger_lesson_fts) "
            "FROM ledger_lesson_fts JOIN ledger_lesson l ON l.id = ledger_lesson_fts.rowid "
            f"WHERE ledger_lesson_fts MATCH %s AND NOT l.retired AND l.domain IN ({marks}){excluding} "
            "ORDER BY bm25(ledger_lesson_fts) LIMIT %s"
        )
    else:
        # Words are letters only, so they are safe tsquery operands; to_tsquery stems them.
        query = " | ".join(words)
        sql = (
            "SELECT l.id, l.rule, l.domain, l.trust, l.benchmark, ts_rank(l.search, q) AS score "
            "FROM ledger_lesson l, to_tsquery('english', %s) q "
            f"WHERE l.search @@ q AND NOT l.retired AND l.domain IN ({marks}){excluding} "
            "ORDER BY score DESC, l.id LIMIT %s"
        )
    with conn.cursor() as cursor:
        cursor.execute(sql, [query, *domains, *([exclude_benchmark] if exclude_benchmark else []), limit])
        rows: Iterable[Any] = cursor.fetchall()
    return [Match(int(r[0]), r[1], r[2], r[3], r[4], float(r[5])) for r in rows]


def pick(matches: Sequence[Match], *, max_lessons: int, max_bytes: int) -> list[Match]:
    """Trusted first (each group in rank order), as many as fit: at most
    `max_lessons`, their rules at most `max_bytes` of UTF-8 together. A rule
    that does not fit is passed over for a shorter one further down."""
    chosen: list[Match] = []
    used = 0
    for match in sorted(matches, key=lambda m: not m.trusted):  # stable: rank order within each group
        size = len(match.rule.encode())
        if used + size > max_bytes:
            continue
        chosen.append(match)
        used += size
        if len(chosen) == max_lessons:
            break
    return chosen
