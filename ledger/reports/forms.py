"""GET filter forms of the report pages (no writes happen through them)."""
from __future__ import annotations

from datetime import date
from typing import Any

from django import forms
from django.forms.utils import flatatt
from django.http import QueryDict
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from ledger.benchmarks.compare import SameSides
from ledger.reports.selectors import run_choices
from ledger.spend.selectors import utc_today

DATE = forms.DateInput(attrs={"type": "date"})


class PlainSelect(forms.Select):
    """A <select> written in Python: the same HTML as forms.Select (no optgroups), without
    Django's two templates per <option> (~60 µs each). The compare page offers the newest
    500 runs in each of its two pickers: 1,000 options took 70 ms of every view
    (docs/performance.md)."""

    def render(self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: Any = None) -> SafeString:
        chosen = set(self.format_value(value))
        options = []
        for option, label in self.choices:
            selected = str(option) in chosen
            chosen.discard(str(option))  # one selected option, the first that matches, as forms.Select
            options.append(f'<option value="{escape(option)}"{" selected" if selected else ""}>{escape(label)}</option>')
        final_attrs = flatatt(self.build_attrs(self.attrs, attrs))
        return mark_safe(f'<select name="{escape(name)}"{final_attrs}>\n' + "\n".join(options) + "\n</select>")


def _choices(values: list[str], blank: str) -> list[tuple[str, str]]:
    return [("", blank)] + [(v, v) for v in values]


def _choice_field(form: forms.Form, name: str) -> forms.ChoiceField:
    """One of the form's choice fields (`form.fields` holds them typed as plain fields)."""
    field = form.fields[name]
    if not isinstance(field, forms.ChoiceField):
        raise TypeError(f"{name} is not a choice field")
    return field


class RunFilterForm(forms.Form):
    group = forms.ChoiceField(required=False)
    benchmark = forms.ChoiceField(required=False)
    target = forms.ChoiceField(required=False)
    since = forms.DateField(required=False, widget=DATE, label="Imported from")
    until = forms.DateField(required=False, widget=DATE, label="to")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        known = run_choices()
        _choice_field(self, "group").choices = _choices(known.groups, "any group")
        _choice_field(self, "benchmark").choices = _choices(known.benchmarks, "any benchmark")
        _choice_field(self, "target").choices = _choices(known.targets, "any target")


class CompareForm(forms.Form):
    """Two runs (by id) or two groups; the page offers both pickers."""

    MODES = [("runs", "two runs"), ("groups", "two groups")]
    mode = forms.ChoiceField(choices=MODES, initial="runs", widget=forms.RadioSelect)
    run_a = forms.TypedChoiceField(required=False, coerce=int, empty_value=None, label="Run A", widget=PlainSelect)
    run_b = forms.TypedChoiceField(required=False, coerce=int, empty_value=None, label="Run B", widget=PlainSelect)
    group_a = forms.ChoiceField(required=False, label="Group A", widget=PlainSelect)
    group_b = forms.ChoiceField(required=False, label="Group B", widget=PlainSelect)

    def __init__(self, *args: Any, runs: list[tuple[int, str]], groups: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        run_options = [("", "pick a run")] + [(str(pk), text) for pk, text in runs]
        for name in ("run_a", "run_b"):
            _choice_field(self, name).choices = run_options
        for name in ("group_a", "group_b"):
            _choice_field(self, name).choices = _choices(groups, "pick a group")

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        a, b = ("run_a", "run_b") if data.get("mode") == "runs" else ("group_a", "group_b")
        if data.get(a) in (None, "") or data.get(b) in (None, ""):
            raise forms.ValidationError("Pick both sides.")
        if data[a] == data[b]:  # the one rule (compare.SameSides): the command and the API say the same
            kind = "run" if data.get("mode") == "runs" else "group"
            raise forms.ValidationError(str(SameSides(kind, f"#{data[a]}" if kind == "run" else repr(data[a]))))
        return data


class SpendRangeForm(forms.Form):
    since = forms.DateField(required=False, widget=DATE, label="From")
    until = forms.DateField(required=False, widget=DATE, label="to")

    MAX_DAYS = 366  # one bar per day: a longer range would be unreadable
    DEFAULT_DAYS = 14

    @classmethod
    def from_query(cls, query: QueryDict) -> SpendRangeForm:
        """Bound to the query with the default range (the last two weeks, UTC)
        filled in, so the form shows the dates the page is for."""
        data = query.copy()
        until_text = data.get("until")
        if not until_text:
            until_text = data["until"] = utc_today().isoformat()
        if not data.get("since"):
            try:
                until = date.fromisoformat(until_text)
            except ValueError:
                until = utc_today()  # the form reports the bad date
            data["since"] = cls.days_before(until).isoformat()
        return cls(data)

    @classmethod
    def days_before(cls, until: date) -> date:
        """The default range's first day; never before 0001-01-01 (an `until` in
        year 1 made this an OverflowError, a 500)."""
        return date.fromordinal(max(1, until.toordinal() - (cls.DEFAULT_DAYS - 1)))

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if self.errors:
            return data  # a field's own error (not a date) is the one to show
        until = data.get("until") or utc_today()
        since = data.get("since") or self.days_before(until)
        if since > until:
            raise forms.ValidationError("The range ends before it starts.")
        if (until - since).days >= self.MAX_DAYS:
            raise forms.ValidationError(f"Pick at most {self.MAX_DAYS} days.")
        data["since"], data["until"] = since, until
        return data

    def range(self) -> tuple[date, date]:
        return self.cleaned_data["since"], self.cleaned_data["until"]

    def query_string(self) -> str:
        """The query the form is bound to, the default range filled in (the CSV link's)."""
        if not isinstance(self.data, QueryDict):
            raise TypeError("bind the form with SpendRangeForm.from_query")
        return self.data.urlencode()


class TraceFilterForm(forms.Form):
    STATUSES = [("", "any status"), ("ok", "ok"), ("error", "error"), ("cancelled", "cancelled")]
    model = forms.CharField(required=False, widget=forms.TextInput(attrs={"list": "known-models"}))
    key = forms.CharField(required=False, widget=forms.TextInput(attrs={"list": "known-keys"}))
    status = forms.ChoiceField(required=False, choices=STATUSES)
    formation_label = forms.CharField(required=False, label="Formation label")
    session = forms.CharField(required=False)
    item = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
