"""Who may see a report page: whoever could see the same rows in the admin
(docs/security.md). Each page names the admin's view permissions it needs."""
from __future__ import annotations

from collections.abc import Callable
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


def needs(*perms: str) -> Callable[[View], View]:
    """A page for a logged-in user (else the login page) who could see the same
    rows in the admin: staff, active, with each of `perms`; anyone else 403."""

    def wrap(view: View) -> View:
        @login_required
        @wraps(view)
        def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            user = request.user
            if not (user.is_active and user.is_staff and user.has_perms(perms)):
                raise PermissionDenied
            return view(request, *args, **kwargs)

        return checked

    return wrap
