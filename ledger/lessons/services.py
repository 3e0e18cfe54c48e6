"""Writes and the request-time read of lessons: keep a proposal (merging a
near-duplicate into the lesson it repeats), promote, retire, recall."""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from ledger.lessons import search
from ledger.lessons.models import MAX_RULE_CHARS, Lesson

RECALL_DOMAINS = ("tools", "code")
MAX_LESSONS = 4
MAX_BYTES = 800
QUERY_CHARS = 500  # of the request text matched against the lessons
# Two rules are near-duplicates when their word sets overlap this much (Jaccard):
# the same rule reworded slightly, not two rules on one topic.
DUPLICATE_OVERLAP = 0.7
MIN_SHARED = 2  # content words a recalled rule must share with the request

_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> set[str]:
    """A rule's content words, crudely stemmed (plural -s dropped), for the duplicate test."""
    out = set()
    for word in _WORD.findall(text.lower()):
        if word in search.STOP_WORDS or len(word) < 3:
            continue
        out.add(word[:-1] if word.endswith("s") and not word.endswith("ss") else word)
    return out


def overlap(a: str, b: str) -> float:
    wa, wb = words(a), words(b)
    if not wa or not wb:
        return 0.0
    return len(wa & wb) / len(wa | wb)


@dataclass(frozen=True)
class Kept:
    lesson: Lesson
    merged: bool  # True: a near-duplicate of `lesson`, which took its provenance


def keep(
    rule: str,
    *,
    domain: str,
    benchmark: str,
    item_ids: Sequence[str],
    run_id: int | None = None,
    source_name: str = "",
    judge_model: str = "",
) -> Kept:
    """Store a proposal that passed the leak guard, or merge it into a live
    lesson of the same domain that says nearly the same (its item ids added,
    its support counted; the older wording stays)."""
    rule = " ".join(rule.split())[:MAX_RULE_CHARS]
    with transaction.atomic():
        for match in search.ranked(rule, domains=[domain], limit=8):
            if overlap(rule, match.rule) >= DUPLICATE_OVERLAP:
                lesson = Lesson.objects.select_for_update().get(pk=match.id)
                lesson.item_ids = sorted(set(lesson.item_ids) | set(item_ids))
                lesson.support += 1
                lesson.save(update_fields=["item_ids", "support", "updated_at"])
                return Kept(lesson, True)
        lesson = Lesson.objects.create(
            rule=rule,
            domain=domain,
            benchmark=benchmark,
            item_ids=sorted(set(item_ids)),
            run_id=run_id,
            source_name=source_name[:255],
            judge_model=judge_model[:200],
        )
    return Kept(lesson, False)


def promote(lessons: QuerySet[Lesson] | Iterable[Lesson]) -> int:
    """Mark as trusted (recalled before the unverified ones)."""
    ids = [lesson.pk for lesson in lessons]
    return Lesson.objects.filter(pk__in=ids).exclude(trust=Lesson.Trust.TRUSTED).update(
        trust=Lesson.Trust.TRUSTED, promoted_at=timezone.now(), updated_at=timezone.now()
    )


def retire(lessons: QuerySet[Lesson] | Iterable[Lesson]) -> int:
    """Never recalled again (kept, with its provenance, for the record)."""
    ids = [lesson.pk for lesson in lessons]
    return Lesson.objects.filter(pk__in=ids, retired=False).update(
        retired=True, retired_at=timezone.now(), updated_at=timezone.now()
    )


def _stems(text: str) -> set[str]:
    """Content words cut to their first 5 letters: "upgrade" and "upgrading" meet
    (the full-text index stems properly; this only counts what is shared)."""
    return {w[:5] for w in words(text)}


def relevant(text: str, rule: str) -> bool:
    """A rule shares at least MIN_SHARED content words (stems) with the request,
    or all of its own when it has fewer: one shared word ("reservation") is
    a topic, not a fit."""
    mine = _stems(rule)
    return len(mine & _stems(text)) >= min(MIN_SHARED, len(mine)) > 0


def recall(text: str, *, benchmark: str | None = None, exclude_benchmark: str = "") -> list[search.Match]:
    """What a request sees: lessons of its own benchmark only (`benchmark`, e.g.
    tau2-airline, when the request's is known; None: unknown, any), never those
    of `exclude_benchmark` (the benchmark being measured), tools/code, relevant
    (see `relevant`), ranked by the full-text index, trusted first, at most
    MAX_LESSONS and MAX_BYTES of rules, matched against the first QUERY_CHARS
    of `text`."""
    if benchmark and benchmark == exclude_benchmark:
        return []  # measuring this benchmark: none of its lessons, and no other domain's
    query = text[:QUERY_CHARS]
    matches = search.ranked(query, domains=RECALL_DOMAINS, benchmark=benchmark, exclude_benchmark=exclude_benchmark)
    fitting = [m for m in matches if relevant(query, m.rule)]
    return search.pick(fitting, max_lessons=MAX_LESSONS, max_bytes=MAX_BYTES)
