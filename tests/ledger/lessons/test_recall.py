"""Recall on the database in use (SQLite's FTS5 here, PostgreSQL's full-text
search when DATABASE_URL names one, as CI's second pass does): ranking, trust,
the 4-lesson / 800-byte budget, retirement, domains, measurement
self-exclusion, and the merging of near-duplicates."""
from __future__ import annotations

import pytest
from django.db import connection

from ledger.lessons import search, services
from ledger.models import Lesson

pytestmark = pytest.mark.django_db


def lesson(rule: str, *, trust: str = "unverified", domain: str = "tools", benchmark: str = "tau2-airline", **kw) -> Lesson:
    return Lesson.objects.create(rule=rule, trust=trust, domain=domain, benchmark=benchmark, **kw)


BAGS = "Before adding checked bags, read the reservation's cabin and membership to count the free bags."
CANCEL = "Cancel a reservation only after the user confirms, and only when the cancellation policy allows it."
REFUND = "Refunds go back to the original payment method; never offer a gift card instead."
UNRELATED = "Greet the customer and ask for the user id before any lookup."


def test_the_lesson_sharing_the_most_words_ranks_first_and_unrelated_ones_are_not_recalled():
    bags, cancel, refund, _ = lesson(BAGS), lesson(CANCEL), lesson(REFUND), lesson("Say goodbye politely at the end.")
    got = services.recall("I want to add two checked bags to my reservation, how many are free?")
    assert [m.id for m in got][:1] == [bags.pk]
    assert refund.pk not in [m.id for m in got]
    got = services.recall("Please cancel my reservation, I cannot travel. The policy allows cancellation, right?")
    assert got[0].id == cancel.pk
    assert services.recall("zzz qqq") == []
    assert services.recall("") == []


def test_stemming_matches_other_forms_of_a_word():
    cancel = lesson(CANCEL)
    assert [m.id for m in services.recall("cancelling my reservations")] == [cancel.pk]


def test_trusted_lessons_come_first_whatever_their_rank():
    weak = lesson("Bags: check the cabin first.", trust="trusted")
    strong = lesson(BAGS)
    got = services.recall("add checked bags to my reservation cabin free bags membership")
    assert [m.id for m in got] == [weak.pk, strong.pk]


def test_at_most_four_lessons_and_800_bytes():
    for i in range(6):
        lesson(f"Bags rule {'abcdefghij'[i]}: count the free checked bags before charging for the extra ones.")
    got = services.recall("checked bags free extra charging")
    assert len(got) == services.MAX_LESSONS == 4
    # Long rules: the byte budget, not the count, stops them; a shorter one further down still fits.
    Lesson.objects.all().delete()
    long_rules = [lesson(("Bags " + "é" * 140 + f" rule {i}: checked bags.")[:300]) for i in range(3)]
    short = lesson("Bags: count checked bags.")
    got = services.recall("checked bags")
    sizes = [len(m.rule.encode()) for m in got]
    assert sum(sizes) <= services.MAX_BYTES
    assert len([m for m in got if m.id in {x.pk for x in long_rules}]) == 2  # 2 × ~310 bytes fit, 3 would not
    assert short.pk in [m.id for m in got]


def test_retired_lessons_and_other_domains_are_not_recalled():
    retired = lesson(BAGS)
    services.retire(Lesson.objects.filter(pk=retired.pk))
    meta = lesson(BAGS, domain="meta")
    code = lesson(BAGS.replace("Before", "When"), domain="code")
    got = [m.id for m in services.recall("checked bags cabin membership")]
    assert got == [code.pk]
    assert retired.pk not in got and meta.pk not in got


def test_a_measurement_never_sees_lessons_of_its_own_benchmark():
    airline = lesson(BAGS, benchmark="tau2-airline")
    retail = lesson(BAGS.replace("reservation", "order"), benchmark="tau2-retail")
    unknown = lesson(BAGS.replace("reservation", "booking"), benchmark="")
    assert {m.id for m in services.recall("checked bags")} == {airline.pk, retail.pk, unknown.pk}
    assert {m.id for m in services.recall("checked bags", exclude_benchmark="tau2-airline")} == {retail.pk, unknown.pk}


def test_a_near_duplicate_is_merged_into_the_lesson_it_repeats():
    first = services.keep(CANCEL, domain="code", benchmark="tau2-airline", item_ids=["3#0"])
    again = services.keep(CANCEL.replace("and only", "but only"), domain="code", benchmark="tau2-airline", item_ids=["5#1"])
    other = services.keep(REFUND, domain="code", benchmark="tau2-airline", item_ids=["5#1"])
    same_words_other_domain = services.keep(CANCEL, domain="tools", benchmark="tau2-airline", item_ids=["7#0"])
    assert (first.merged, again.merged, other.merged, same_words_other_domain.merged) == (False, True, False, False)
    merged = Lesson.objects.get(pk=first.lesson.pk)
    assert again.lesson.pk == merged.pk and merged.support == 2 and merged.item_ids == ["3#0", "5#1"]
    assert merged.rule == CANCEL, "the older wording stays"
    assert Lesson.objects.count() == 3


def test_an_edited_rule_is_found_by_its_new_words_only():
    bags = lesson(BAGS)
    bags.rule = UNRELATED
    bags.save()
    assert services.recall("checked bags cabin") == []
    assert [m.id for m in services.recall("greet the customer, user id lookup")] == [bags.pk]
    bags.delete()
    assert services.recall("greet the customer, user id lookup") == []


def test_query_terms_are_words_only_so_no_operator_reaches_the_index():
    assert search.terms('bags" OR rule:* NEAR(x) AND -- ; DROP TABLE & | !') == ["bags", "rule", "near", "drop", "table"]
    lesson(BAGS)
    assert services.recall('checked" bags* OR ( ) : ^ & | ! <-> \' "') != []


def test_with_many_lessons_common_words_are_left_out_of_the_query(monkeypatch):
    monkeypatch.setattr(search, "PRUNE_FROM", 10)
    monkeypatch.setattr(search, "COMMON_SHARE", 0.5)
    search.frequencies.forget()
    for i in range(12):
        lesson(f"Check the reservation before step {'abcdefghijkl'[i]} of any change.")
    bags = lesson("Count the free checked bags from the reservation's cabin.")
    try:
        got = [m.id for m in services.recall("my reservation: add checked bags")]
        # "reservation" is in all 13 lessons: queried, it would rank all of them; left out, only bags matches.
        assert got == [bags.pk]
        assert search.prune(["reservation", "bags"], *search.frequencies.of(connection, ["reservation", "bags"])) == ["bags"]
        # Every word common: the rarest are still queried, so something is recalled.
        assert len(services.recall("check the reservation")) == services.MAX_LESSONS
    finally:
        search.frequencies.forget()


def test_recall_is_scoped_to_the_requests_benchmark_and_needs_more_than_one_shared_word():
    airline = lesson(BAGS, benchmark="tau2-airline")
    retail = lesson(BAGS.replace("reservation", "order"), benchmark="tau2-retail")
    assert {m.id for m in services.recall("add checked bags", benchmark="tau2-airline")} == {airline.pk}
    assert {m.id for m in services.recall("add checked bags", benchmark="tau2-retail")} == {retail.pk}
    assert services.recall("add checked bags", benchmark="tau2-airline", exclude_benchmark="tau2-airline") == []
    # One shared word is a topic, not a fit: "bags" alone does not recall a rule about checked bags.
    assert services.recall("where are my bags", benchmark="tau2-airline") == []
