"""Pages that know who is looking (ledger/reports/access.py, errors.py): the navigation and
`/` offer only what the user may open; 403 and 404 come in the site's layout and name the
permission missing; compare links to trajectories only for whom may open them."""
from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ledger.reports.access import PAGES
from tests.ledger.builders import make_run
from tests.ledger.conftest import readers_account


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _nav(html: str) -> list[str]:
    return re.findall(r'<a href="[^"]*"(?: class="active")?>([^<]+)</a>', html.split("<nav")[1].split("</nav>")[0])


@pytest.fixture
def runs_only(db) -> Client:
    return _client(readers_account("runs-reader", ("view_benchmarkrun",)))


@pytest.fixture
def no_rights(db) -> Client:
    return _client(readers_account("no-rights", ()))


def test_the_navigation_shows_only_the_pages_a_user_may_open(runs_only: Client, user_client: Client) -> None:
    html = runs_only.get("/reports/runs/").content.decode()
    assert _nav(html) == ["Runs", "Compare", "Admin"]
    assert '<a class="brand" href="/reports/runs/">' in html  # the logo goes where the user may go
    assert _nav(user_client.get("/reports/runs/").content.decode()) == [p.title for p in PAGES] + ["Admin"]


def test_each_page_opens_for_exactly_the_permissions_the_navigation_names(db) -> None:
    """The navigation's table and the views' `needs` agree: a user holding a page's
    permissions opens it; one without any of them gets 403."""
    for n, page in enumerate(PAGES):
        codenames = tuple(p.split(".")[1] for p in page.perms)
        holder = _client(readers_account(f"holder-{n}", codenames))
        assert holder.get(f"/reports/{'' if page.name == 'index' else page.name + '/'}").status_code == 200, page.name
        lacking = _client(readers_account(f"lacking-{n}", codenames[1:]))
        assert lacking.get(f"/reports/{'' if page.name == 'index' else page.name + '/'}").status_code == 403, page.name


def test_a_403_is_in_the_sites_layout_and_names_the_missing_permission(runs_only: Client) -> None:
    response = runs_only.get("/reports/spend/")
    html = response.content.decode()
    assert response.status_code == 403
    assert '<header class="top">' in html and _nav(html) == ["Runs", "Compare", "Admin"]
    reason = html.split('id="reason">')[1].split("</p>")[0]
    assert reason == "This page needs the permission view daily spend (ledger.view_spenddaily)."
    overview = runs_only.get("/reports/").content.decode().split('id="reason">')[1].split("</p>")[0]
    assert "ledger.view_spenddaily" in overview and "ledger.view_trace" in overview and "view_benchmarkrun" not in overview


def test_root_lands_on_the_first_page_a_user_may_open(client: Client, runs_only: Client, no_rights: Client, user_client: Client) -> None:
    assert client.get("/")["Location"] == "/admin/login/?next=/"
    assert runs_only.get("/")["Location"] == "/reports/runs/"
    assert user_client.get("/")["Location"] == "/reports/"
    response = no_rights.get("/")
    html = response.content.decode()
    assert response.status_code == 403 and '<header class="top">' in html
    assert "none of the report pages" in html and "ledger.view_benchmarkrun" in html
    assert _nav(html) == ["Admin"]


def test_a_user_who_is_not_staff_is_told_so(db) -> None:
    user = User.objects.create_user("visitor", password="not-a-real-password-1")
    response = _client(user).get("/reports/runs/")
    assert response.status_code == 403 and "for staff accounts" in response.content.decode()
    assert _nav(response.content.decode()) == []


def test_a_404_is_in_the_sites_layout(user_client: Client, client: Client) -> None:
    response = user_client.get("/reports/no-such-page/")
    html = response.content.decode()
    assert response.status_code == 404 and '<header class="top">' in html and "There is no page at /reports/no-such-page/." in html
    assert response["Content-Type"].startswith("text/html")
    anonymous = client.get("/no-such-page").content.decode()
    assert "Log in" in anonymous and "<nav" in anonymous and _nav(anonymous) == []
    # The API keeps its JSON envelope.
    api = client.get("/api/no-such-thing")
    assert api.status_code == 404 and api.json()["error"]["code"] == "not_found"


def test_compare_links_to_trajectories_only_for_whom_may_open_them(runs_only: Client, user_client: Client) -> None:
    a = make_run({"1#0": 1.0, "2#0": 0.0}, group="arm-a")
    b = make_run({"1#0": 0.0, "2#0": 0.0}, group="arm-b")
    url = f"/reports/compare/?mode=runs&run_a={a.pk}&run_b={b.pk}"
    assert 'class="side-by-side"' in user_client.get(url).content.decode()
    html = runs_only.get(url).content.decode()
    assert "B passed" in html and 'class="side-by-side"' not in html and "/reports/trajectories/" not in html
    assert runs_only.get(f"/reports/trajectories/?a={a.pk}&b={b.pk}&task=1").status_code == 403
