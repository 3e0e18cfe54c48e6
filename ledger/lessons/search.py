"""Lexical recall of lessons on the database's own full-text index.

SQLite: an FTS5 table (`ledger_lesson_fts`, porter stemmer) over the rule,
external-content, kept in step with `ledger_lesson` by triggers; ranked by
FTS5's bm25(). PostgreSQL: a generated `search` tsvector column (English
configuration) with a GIN index; ranked by ts_rank. Both are made by
migration 0008_lessons. Why the database and not a BM25 library:
docs/lessons.md.

A query is the words of a text (letters only, 3+ characters, no stop words,
at most 32 distinct), OR-ed: a lesson matches when it shares a word (a stem)
with the request, and ranks by how many, how rare and how often.

Words found in more than 5 % of the lessons are left out of the query once
there are 200 lessons or more (the 3 rarest are kept when all are that
common). Such a word says little about which lesson fits (its BM25 weight
is small), but every lesson holding it would be ranked: with 10,000 lessons
on one benchmark, "reservation" alone matches thousands, and ranking them
all took 25 ms (SQLite) to 60 ms (PostgreSQL) a recall. The word counts come
from the index itself and are kept per process for 5 minutes
(bench/lessons_recall.py, docs/lessons.md)."""
from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection as default_connection
from django.db.backends.base.base import BaseDatabaseWrapper

MAX_TERMS = 32
CANDIDATES = 16  # ranked matches read per recall; the budget picks from these
COMMON_SHARE = 0.05  # a word in more than this share of the lessons is left out of the query...
PRUNE_FROM = 200  # ...once there are this many lessons
KEEP_AT_LEAST = 3  # the rarest words kept when every word is common
MAX_QUERIED = 8  # at most this many of the rarest words are queried (with many lessons)
FREQUENCY_SECONDS = 300.0  # how long a process trusts its word counts

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


class _Frequencies:
    """How many lessons hold each query word, and how many there are: read
    from the full-text index as words come up, forgotten every FREQUENCY_SECONDS.
    Only used to leave common words out, so a count a few minutes old is fine."""

    def __init__(self) -> None:
        self.read_at = float("-inf")
        self.total = 0
        self.counts: dict[str, int] = {}

    def forget(self) -> None:
        self.read_at = float("-inf")

    def of(self, conn: BaseDatabaseWrapper, words: Sequence[str]) -> tuple[int, dict[str, int]]:
        now = time.monotonic()
        if now - self.read_at > FREQUENCY_SECONDS:
            with conn.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM ledger_lesson")
                self.total = int(cursor.fetchone()[0])
            self.counts, self.read_at = {}, now
        if self.total < PRUNE_FROM:
            return self.total, {}
        missing = [w for w in words if w not in self.counts]
        if missing:
            if conn.vendor == "sqlite":
                one = "SELECT count(*) FROM ledger_lesson_fts WHERE ledger_lesson_fts MATCH %s"
                args = [f'"{w}"' for w in missing]
            else:
                one = "SELECT count(*) FROM ledger_lesson WHERE search @@ to_tsquery('english', %s)"
                args = list(missing)
            sql = " UNION ALL ".join(f"SELECT {i}, ({one})" for i in range(len(missing)))
            with conn.cursor() as cursor:
                cursor.execute(sql, args)
                for i, count in cursor.fetchall():
                    self.counts[missing[int(i)]] = int(count)
        return self.total, {w: self.counts[w] for w in words}


frequencies = _Frequencies()


def prune(words: Sequence[str], total: int, counts: dict[str, int]) -> list[str]:
    """The words worth querying (see the module doc)."""
    if total < PRUNE_FROM or not counts:
        return list(words)
    limit = COMMON_SHARE * total
    rarest = sorted(words, key=lambda w: counts[w])
    kept = [w for w in rarest if counts[w] <= limit][:MAX_QUERIED]
    return kept or rarest[:KEEP_AT_LEAST]


def ranked(
    text: str,
    *,
    domains: Sequence[str],
    exclude_benchmark: str = "",
    benchmark: str | None = None,
    limit: int = CANDIDATES,
    connection: BaseDatabaseWrapper | None = None,
) -> list[Match]:
    """Live (not retired) lessons of `domains` sharing a word with `text`, best
    first; lessons of `exclude_benchmark` are left out (measurement requests);
    with `benchmark` ('' too) only that benchmark's lessons are read."""
    words = terms(text)
    if not words or not domains:
        return []
    conn = connection or default_connection
    words = prune(words, *frequencies.of(conn, words))
    marks = ", ".join(["%s"] * len(domains))
    excluding = " AND l.benchmark <> %s" if exclude_benchmark else ""
    if benchmark is not None:
        excluding += " AND l.benchmark = %s"
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
        scoped = [*([exclude_benchmark] if exclude_benchmark else []), *([benchmark] if benchmark is not None else [])]
        cursor.execute(sql, [query, *domains, *scoped, limit])
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
