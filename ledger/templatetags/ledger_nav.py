"""The report pages' navigation: only the pages the user may open (ledger.reports.access)."""
from __future__ import annotations

from typing import Any

from django import template
from django.urls import reverse

from ledger.reports.access import visible_pages

register = template.Library()


@register.simple_tag(takes_context=True)
def report_nav(context: dict[str, Any]) -> list[dict[str, Any]]:
    """[{title, url, active}] for the pages `request.user` may open, in PAGES' order."""
    request = context.get("request")
    if request is None:
        return []
    match = getattr(request, "resolver_match", None)
    current = match.url_name if match and match.namespace == "reports" else None
    return [
        {"title": page.title, "url": reverse(f"reports:{page.name}"), "active": current in page.active}
        for page in visible_pages(request.user)
    ]
