"""The compare page's pickers and its per-task table, written without Django's per-option
templates and without django-tables2 (docs/performance.md): the same choices selected and the
same text escaped as forms.Select, and each disagreeing task linked to its two trajectories."""
from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django import forms
from django.test import Client

from ledger.benchmarks.compare import TaskDiff
from ledger.reports.forms import PlainSelect
from ledger.reports.insight_views import disagreement_rows
from tests.ledger.builders import make_run

CHOICES = [("", "pick a run"), ("7", "#7 <b>bold</b> & 'quoted'"), ("12", 'a "quoted" label'), ("7", "#7 again")]


def _options(markup: str) -> list[tuple[str, bool, str]]:
    """(value, selected, label) of each <option>, as a browser reads them."""
    found = re.findall(r'<option value="([^"]*)"( selected)?>([^<]*)</option>', markup)
    return [(html.unescape(value), bool(selected), html.unescape(label)) for value, selected, label in found]


@pytest.mark.parametrize("value", ["7", 12, None, "", "99", "<script>"])
def test_plain_select_selects_and_escapes_as_forms_select(value: Any) -> None:
    plain = PlainSelect(choices=CHOICES).render("run_a", value, attrs={"id": "id_run_a"})
    django = forms.Select(choices=CHOICES).render("run_a", value, attrs={"id": "id_run_a"})
    assert _options(plain) == _options(django)
    assert len(_options(plain)) == len(CHOICES) and "<b>" not in plain  # every option, its label escaped
    assert plain.startswith('<select name="run_a" id="id_run_a">') and plain.endswith("</select>")
    # One option selected at most, the first of equal values (a browser would show the last of several).
    assert [o for o in _options(plain) if o[1]] == ([] if value in ("99", "<script>") else [(str(value or ""), True, {
        "7": CHOICES[1][1], "12": CHOICES[2][1], "": CHOICES[0][1]}[str(value or "")])])


def test_disagreement_rows_link_each_task_to_the_same_two_sides() -> None:
    tasks = [TaskDiff("8", 1, 4, 4, 4), TaskDiff("a&b", 2, 4, 0, 4)]
    rows = disagreement_rows(tasks, {"mode": "runs", "run_a": 3, "run_b": 5})
    assert [(r.task_id, r.a, r.b, r.diff) for r in rows] == [("8", "1/4", "4/4", "+0.750"), ("a&b", "2/4", "0/4", "-0.500")]
    assert [r.trajectories for r in rows] == [
        "/reports/trajectories/?a=3&b=5&task=8", "/reports/trajectories/?a=3&b=5&task=a%26b"]
    groups = disagreement_rows(tasks[:1], {"mode": "groups", "group_a": "arm a", "group_b": "arm-b"})
    assert groups[0].trajectories == "/reports/trajectories/?group_a=arm+a&group_b=arm-b&task=8"
    assert [r.trajectories for r in disagreement_rows(tasks, {"mode": "runs", "run_a": 3, "run_b": 5}, linked=False)] == ["", ""]


def test_compare_page_draws_the_table_and_the_pickers(user_client: Client, db) -> None:
    a = make_run({"1#0": 1.0, "2#0": 0.0, "3#0": 1.0}, group="arm-a")
    b = make_run({"1#0": 0.0, "2#0": 0.0, "3#0": 1.0}, group="arm-b")
    page = user_client.get("/reports/compare/", {"mode": "runs", "run_a": a.pk, "run_b": b.pk}).content.decode()
    table = page.split('<table class="report" id="disagreements">')[1].split("</table>")[0]
    # Task 1 alone disagrees: A passed it, B did not.
    assert re.findall(r"<tr><td>([^<]*)</td>", table) == ["1"]
    assert '<td class="num">1/1</td><td class="num">0/1</td><td class="num">-1.000</td>' in table
    assert f'href="/reports/trajectories/?a={a.pk}&amp;b={b.pk}&amp;task=1"' in table
    picked = page.split('<select name="run_a" id="id_run_a">')[1].split("</select>")[0]
    assert [(v, s) for v, s, _ in _options(picked) if s] == [(str(a.pk), True)]
    assert {v for v, _, _ in _options(picked)} == {"", str(a.pk), str(b.pk)}
