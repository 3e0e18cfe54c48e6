"""What keeps the admin's changelists fast over millions of traces and spans.

Django's changelist asks for two things that grow with the table: the number
of rows the filters select (a COUNT(*) over all of them, on every page, for the
paginator) and, for each `list_filter` on a plain field, the distinct values of
that field (a scan of the whole table). Over 2,000,000 traces each costs
seconds on PostgreSQL (bench/reports_scale.py measured it).

- `CappedCountPaginator` counts at most `CAP` rows (`COUNT(*)` over a `LIMIT`ed
  subquery stops early), so the cost of a page no longer depends on the table's
  size; the changelist then offers the first CAP / per_page pages, and filters
  or the search narrow further.
- `ChoicesFilter` lists fixed values (a status, a cost source) without asking
  the database for them.
"""
from __future__ import annotations

from typing import Any, ClassVar

from django.contrib import admin
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.functional import cached_property


class CappedCountPaginator(Paginator):
    CAP = 10_000

    @cached_property
    def count(self) -> int:
        objects = self.object_list
        if isinstance(objects, QuerySet):
            return objects.order_by()[: self.CAP].count()
        return min(len(objects), self.CAP)


class ChoicesFilter(admin.SimpleListFilter):
    """A filter on one field with a fixed list of values (subclasses set
    `title`, `parameter_name` and `values`)."""

    values: ClassVar[list[tuple[str, str]]] = []

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return self.values

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None or not self.parameter_name:
            return queryset
        return queryset.filter(**{self.parameter_name: value})


class StatusFilter(ChoicesFilter):
    title = "status"
    parameter_name = "status"
    values = [("ok", "ok"), ("error", "error"), ("cancelled", "cancelled")]


class CostSourceFilter(ChoicesFilter):
    title = "cost source"
    parameter_name = "cost_source"
    values = [("provider", "provider"), ("price_table", "price table"), ("none", "none")]
