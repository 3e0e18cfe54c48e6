"""Who may see a report page: whoever could see the same rows in the admin
(docs/security.md). Each page names the admin's view permissions it needs; the
navigation, `/` and the error pages ask the same table (`PAGES`), so a link is
shown only to whom it opens."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

View = Callable[..., HttpResponse]
RUNS = "ledger.view_benchmarkrun"
SPEND = "ledger.view_spenddaily"
TRACES = "ledger.view_trace"
EXPERIMENTS = "ledger.view_experiment"

# What each permission lets a person see, for the 403 page.
PERMISSION_NAMES = {
    RUNS: "view benchmark runs",
    SPEND: "view daily spend",
    TRACES: "view traces",
    EXPERIMENTS: "view experiments",
}


@dataclass(frozen=True)
class Page:
    """A page of the navigation: its URL name, title, the permissions its view
    asks (`needs`) and the URL names that mark it active."""

    name: str
    title: str
    perms: tuple[str, ...]
    active: tuple[str, ...]


# In the navigation's order; `/` lands on the first one a user may open.
PAGES = (
    Page("index", "Overview", (RUNS, SPEND, TRACES), ("index",)),
    Page("runs", "Runs", (RUNS,), ("runs", "run")),
    Page("compare", "Compare", (RUNS,), ("compare", "trajectories")),
    Page("frontier", "Frontier", (RUNS, SPEND), ("frontier",)),
    Page("experiments", "Experiments", (EXPERIMENTS,), ("experiments", "experiment")),
    Page("spend", "Spend", (SPEND,), ("spend",)),
    Page("traces", "Traces", (TRACES,), ("traces", "trace")),
)
# The trajectories page (compare's "A and B side by side").
TRAJECTORIES = (RUNS, TRACES)


def may_see(user: Any, perms: tuple[str, ...]) -> bool:
    """What the admin asks: an active staff account with each of `perms`."""
    return bool(user.is_authenticated and user.is_active and user.is_staff and user.has_perms(perms))


def visible_pages(user: Any) -> list[Page]:
    return [page for page in PAGES if may_see(user, page.perms)]


def missing(user: Any, perms: tuple[str, ...]) -> str:
    """Why `user` may not open a page needing `perms`, in words for the 403 page."""
    if not (user.is_active and user.is_staff):
        return "This page is for staff accounts (Staff status in the admin's user page)."
    lacking = [p for p in perms if not user.has_perm(p)]
    names = ", ".join(f"{PERMISSION_NAMES.get(p, p)} ({p})" for p in lacking)
    return f"This page needs the permission{'s' if len(lacking) != 1 else ''} {names}."


def needs(*perms: str) -> Callable[[View], View]:
    """A page for a logged-in user (else the login page) who could see the same
    rows in the admin: staff, active, with each of `perms`; anyone else 403,
    naming what is missing."""

    def wrap(view: View) -> View:
        @login_required
        @wraps(view)
        def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not may_see(request.user, perms):
                raise PermissionDenied(missing(request.user, perms))
            return view(request, *args, **kwargs)

        return checked

    return wrap
