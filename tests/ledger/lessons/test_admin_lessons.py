"""Lessons in the Django admin: listed, searched, promoted and retired with
the admin actions (through the changelist form, as a person does), and what
that changes in recall."""
from __future__ import annotations

from django.test import Client
from django.urls import reverse

from ledger.lessons import services
from ledger.models import Lesson

BAGS = "Before adding checked bags, read the cabin and membership to count the free bags."
REFUND = "Refunds go back to the original payment method; never offer a gift card instead."


def _act(client: Client, action: str, *lessons: Lesson):
    return client.post(
        reverse("admin:ledger_lesson_changelist"),
        {"action": action, "_selected_action": [str(lesson.pk) for lesson in lessons]},
        follow=True,
    )


def test_list_and_search(admin_client: Client, db) -> None:
    Lesson.objects.create(rule=BAGS, benchmark="tau2-airline")
    Lesson.objects.create(rule=REFUND, benchmark="tau2-retail")
    url = reverse("admin:ledger_lesson_changelist")
    page = admin_client.get(url).content.decode()
    assert "checked bags" in page and "gift card" in page
    found = admin_client.get(url, {"q": "gift card"}).content.decode()
    assert "gift card" in found and "checked bags" not in found
    retail = admin_client.get(url, {"benchmark": "tau2-retail"}).content.decode()
    assert "original payment method" in retail and "checked bags" not in retail


def test_promote_puts_a_lesson_first_and_retire_removes_it_from_recall(admin_client: Client, db) -> None:
    strong = Lesson.objects.create(rule=BAGS)
    weak = Lesson.objects.create(rule="Bags: ask about the cabin first.")
    query = "add checked bags cabin membership free bags"
    assert [m.id for m in services.recall(query)] == [strong.pk, weak.pk]

    response = _act(admin_client, "promote", weak)
    assert "Promoted 1 lesson(s) to trusted." in response.content.decode()
    weak.refresh_from_db()
    assert weak.trust == "trusted" and weak.promoted_at is not None
    assert [m.id for m in services.recall(query)] == [weak.pk, strong.pk]

    response = _act(admin_client, "retire", weak)
    assert "Retired 1 lesson(s)." in response.content.decode()
    weak.refresh_from_db()
    assert weak.retired and weak.retired_at is not None
    assert [m.id for m in services.recall(query)] == [strong.pk]


def test_lessons_are_not_written_by_hand(admin_client: Client, db) -> None:
    lesson = Lesson.objects.create(rule=BAGS)
    assert admin_client.get(reverse("admin:ledger_lesson_add")).status_code == 403
    admin_client.post(reverse("admin:ledger_lesson_change", args=[lesson.pk]), {"rule": "Changed by hand, leaking FQ8APE."})
    lesson.refresh_from_db()
    assert lesson.rule == BAGS


def test_a_non_staff_user_cannot_promote(client: Client, db) -> None:
    lesson = Lesson.objects.create(rule=BAGS)
    response = _act(client, "promote", lesson)
    lesson.refresh_from_db()
    assert lesson.trust == "unverified" and "/admin/login/" in response.redirect_chain[0][0]
