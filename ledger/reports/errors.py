"""The site's own 403 and 404 pages and its front door `/`: in the reports' layout,
with the navigation the user may open, naming the permission a page needs
(marina/urls.py's handler403/handler404). The API and /v1 answer their own errors
as JSON envelopes before these are reached."""
from __future__ import annotations

from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from ledger.reports.access import PAGES, PERMISSION_NAMES, visible_pages


def home(request: HttpRequest) -> HttpResponse:
    """`/`: the first report page the user may open; the login page for a visitor;
    a 403 saying what to ask for when there is none."""
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    pages = visible_pages(request.user)
    if pages:
        return redirect(reverse(f"reports:{pages[0].name}"))
    needed = sorted({p for page in PAGES for p in page.perms})
    reason = (
        "Your account may open none of the report pages. Each needs a staff account with one or more of "
        + ", ".join(f"{PERMISSION_NAMES[p]} ({p})" for p in needed)
        + ": ask an administrator to grant them in the admin's user page."
    )
    return _error(request, 403, "Nothing to show you yet", reason)


def forbidden(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    reason = str(exception) if exception and str(exception) else "Your account may not open this page."
    return _error(request, 403, "Not allowed", reason)


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return _error(request, 404, "Not found", f"There is no page at {request.path}.")


def _error(request: HttpRequest, status: int, title: str, reason: str) -> HttpResponse:
    context = {"status": status, "title": title, "reason": reason}
    return render(request, "ledger/error.html", context, status=status)
