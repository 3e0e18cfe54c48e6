"""Crews in the Django admin: create, edit, enable or disable the named
endpoints served as `marina:<name>` (passthru/crews.py serves them)."""
from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from passthru import crews, providers
from passthru.errors import ApiError
from passthru.formations import stack
from passthru.formations.verify import formation as verify
from passthru.models import Crew


def model_id_problem(model_id: str) -> str:
    """Why Marina cannot serve `model_id` now, or '' (the same checks a request meets before any upstream call)."""
    if crews.is_crew_id(model_id):
        return "a crew cannot serve another crew: give the model id that crew serves."
    inner = stack.plan(model_id, {}).inner  # what the stacked checks' prefixes wrap
    try:
        if inner == model_id and not inner.startswith(verify.PREFIX):
            providers.plan(model_id)  # a plain id: the passthru's routing
            return ""
        parts = [p for p in verify.split_id(inner) if p is not None] if inner.startswith(verify.PREFIX) else [inner]
        for part in parts:
            if not part:
                return f"a model is missing: give one after each prefix and after '+' ({verify.PREFIX}<proposer>[+<checker>])."
            if crews.is_crew_id(part) or part.startswith((stack.OBLIGATIONS_PREFIX, stack.ARGCHECK_PREFIX)):
                return f"'{part}' cannot be wrapped there (see docs/formations.md for what stacks)."
            providers.resolve(part)  # formation steps: one named provider
    except ApiError as exc:
        return exc.message
    return ""


class CrewForm(forms.ModelForm):
    reasoning_effort = forms.ChoiceField(
        choices=[("", "(none: the caller's, else the model's default)")] + [(e, e) for e in crews.EFFORTS],
        required=False,
        help_text=Crew._meta.get_field("reasoning_effort").help_text,
    )

    class Meta:
        model = Crew
        fields = ["name", "description", "model_id", "system_text", "reasoning_effort", "enabled"]

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"]
        if name in crews.RESERVED_NAMES:
            raise forms.ValidationError(f"'marina:{name}' is the default model's id; choose another name.")
        return name

    def clean_model_id(self) -> str:
        model_id: str = self.cleaned_data["model_id"].strip()
        problem = model_id_problem(model_id)
        if problem:
            raise forms.ValidationError(f"Marina cannot serve this id: {problem}")
        return model_id


@admin.register(Crew)
class CrewAdmin(admin.ModelAdmin):
    form = CrewForm
    list_display = ["name", "served_as", "model_id", "reasoning_effort", "enabled", "updated_at"]
    list_filter = ["enabled"]
    search_fields = ["name", "description", "model_id"]
    actions = ["enable", "disable"]

    @admin.display(description="served as")
    def served_as(self, crew: Crew) -> str:
        return crew.served_as

    @admin.action(description="Enable the selected crews")
    def enable(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self.message_user(request, f"{queryset.update(enabled=True)} crew(s) enabled.", messages.SUCCESS)

    @admin.action(description="Disable the selected crews (marina:<name> then answers 404)")
    def disable(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self.message_user(request, f"{queryset.update(enabled=False)} crew(s) disabled.", messages.SUCCESS)
