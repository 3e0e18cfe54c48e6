"""The JSON read API (marina/read_api.py) through Django's test client: who
may read, bad parameters and unknown ids in OpenAI's envelope, and the same
figures as the command line (`compare --json`, `spend --json`) and the report
pages, side by side, on runs imported from the τ² fixtures."""
from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from kernel import money
from ledger.models import BenchmarkRun
from ledger.spend.selectors import utc_today
from ledger.templatetags.ledger_format import duration, rate, signed
from tests.conftest import MARINA_KEY
from tests.ledger.conftest import READ_PERMISSIONS, import_fixture, readers_account
from tests.ledger.report_builders import record_trace
from tests.ledger.tau2files import FAKE_KEY

KEY = {"HTTP_AUTHORIZATION": f"Bearer {MARINA_KEY}"}


@pytest.fixture
def keyed(settings, django_db_blocker) -> Iterator[Client]:
    settings.MODEL_API_KEYS = f"{MARINA_KEY}:tester"
    settings.MARINA_OPEN_API = False
    from ledger.spend.services import close_writer_connection
    from passthru import auth

    auth.forget()
    yield Client(HTTP_HOST="127.0.0.1")
    with django_db_blocker.unblock():
        close_writer_connection()  # the stored keys are read on the ledger writer's connection


@pytest.fixture
def runs(db) -> dict[str, BenchmarkRun]:
    return {
        "a": import_fixture("airline-oracle", target="openrouter/oracle-agent", group="arm-a", cost_usd=0.8),
        "b": import_fixture("airline-infra-errors", target="marina/verify:openrouter/oracle-agent", group="arm-b", cost_usd=1.14),
        "retail": import_fixture("retail-oracle", target="openrouter/oracle-agent", group="retail"),
    }


def staff_client(staff: bool = True, permissions: tuple[str, ...] = READ_PERMISSIONS) -> Client:
    """A staff session with the ledger's view permissions (or those given); not staff: a plain user."""
    name = f"ops{User.objects.count()}" if staff else "reader"
    user = readers_account(name, permissions) if staff else User.objects.create_user(name, password="not-a-real-password-1")
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(user)
    return client


def get(client: Client, url: str, **extra: Any) -> tuple[int, Any]:
    response = client.get(url, **extra)
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    return response.status_code, json.loads(response.content)


def figure(html: str, name: str) -> str:
    # The text shown, inside the `money` filter's span when there is one (its title holds the exact figure).
    match = re.search(rf'data-figure="{re.escape(name)}">(?:<span[^>]*>)*([^<]*)<', html)
    assert match, f"no figure {name!r} on the page"
    return match.group(1)


# --- Who may read ------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["/api/runs", "/api/runs/1", "/api/compare?a=1&b=2", "/api/spend", "/api/traces/x"])
def test_no_key_is_401_and_a_wrong_key_too(keyed, runs, url):
    status, body = get(keyed, url)
    assert status == 401 and body["error"]["type"] == "authentication_error"
    status, body = get(keyed, url, HTTP_AUTHORIZATION="Bearer sk-marina-wrong")
    assert (status, body["error"]["message"]) == (401, "Invalid API key.")
    # auth comes first: a stranger's bad parameter is a 401 too, not a 400 describing it
    assert get(keyed, "/api/runs?per_page=0")[0] == 401


def test_a_staff_session_reads_and_a_plain_user_is_refused(keyed, runs):
    assert get(staff_client(), "/api/runs")[0] == 200
    status, body = get(staff_client(staff=False), "/api/runs")
    assert status == 403 and body["error"]["type"] == "permission_error"
    assert get(keyed, "/api/runs", **KEY)[0] == 200


def test_an_open_api_opens_v1_not_the_ledger(settings, runs):
    settings.MODEL_API_KEYS = ""
    settings.MARINA_OPEN_API = True
    from passthru import auth

    auth.forget()
    client = Client(HTTP_HOST="127.0.0.1")
    assert get(client, "/api/runs")[0] == 401
    assert get(client, "/api/runs", HTTP_AUTHORIZATION="Bearer anything")[0] == 401
    assert get(staff_client(), "/api/runs")[0] == 200


# --- Bad parameters and unknown ids ------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "status", "param"),
    [
        ("/api/runs?since=2026-13-01", 400, "since"),
        ("/api/runs?per_page=201", 400, "per_page"),
        ("/api/runs?page=0", 400, "page"),
        ("/api/runs?page=994839873799730176", 400, "page"),
        ("/api/runs?until=0", 400, "until"),
        ("/api/spend?until=0", 400, "until"),
        ("/api/runs?since=2026-12-05&until=2026-12-01", 400, "since"),
        ("/api/runs/abc", 400, "run_id"),
        ("/api/runs/99999999999999999999", 400, "run_id"),
        ("/api/runs/999999", 404, None),
        ("/api/compare", 400, "a"),
        ("/api/compare?a={a}", 400, "b"),
        ("/api/compare?a={a}&b=999999", 404, None),
        ("/api/compare?a={a}&b={b}&group_a=arm-a", 400, "a"),
        ("/api/compare?group_a=arm-a&group_b=nope", 404, None),
        ("/api/compare?a={a}&b={b}&resamples=0", 400, "resamples"),
        ("/api/spend?since=bad", 400, "since"),
        ("/api/spend?since=2026-12-05&until=2026-12-01", 400, "since"),
        ("/api/spend?since=2024-01-01&until=2026-01-01", 400, "since"),
        ("/api/traces/no-such-request", 404, None),
    ],
)
def test_bad_parameters_are_400_and_unknown_ids_404_in_the_envelope(keyed, runs, url, status, param):
    got, body = get(keyed, url.format(a=runs["a"].pk, b=runs["b"].pk), **KEY)
    assert got == status, body
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["param"] == param and body["error"]["message"]
    assert body["error"]["type"] == ("not_found_error" if status == 404 else "invalid_request_error")


def test_comparing_an_invalid_run_is_a_400_naming_it(keyed, runs):
    call_command("benchmark_import", invalidate=runs["b"].pk, reason="user simulator misconfigured", stdout=io.StringIO())
    status, body = get(keyed, f"/api/compare?a={runs['a'].pk}&b={runs['b'].pk}", **KEY)
    assert status == 400 and "user simulator misconfigured" in body["error"]["message"]


# --- The same figures as the command line and the pages ------------------------------------


def test_compare_is_the_commands_json(keyed, runs):
    a, b = runs["a"].pk, runs["b"].pk
    out = io.StringIO()
    call_command("compare", str(a), str(b), "--json", "--seed", "3", "--resamples", "500", stdout=out)
    status, body = get(keyed, f"/api/compare?a={a}&b={b}&seed=3&resamples=500", **KEY)
    assert status == 200 and body == json.loads(out.getvalue())
    assert body["sign"] == "B - A" and body["shared_items"] > 0
    out = io.StringIO()
    call_command("compare", "--group", "arm-a", "--group", "arm-b", "--json", stdout=out)
    assert get(keyed, "/api/compare?group_a=arm-a&group_b=arm-b", **KEY)[1] == json.loads(out.getvalue())


def test_compare_matches_the_compare_page(keyed, runs):
    a, b = runs["a"].pk, runs["b"].pk
    body = get(keyed, f"/api/compare?a={a}&b={b}", **KEY)[1]
    html = staff_client().get(f"/reports/compare/?mode=runs&run_a={a}&run_b={b}").content.decode()
    assert figure(html, "diff_pass1") == signed(body["diff_pass1"])
    assert f"A [{rate(body['a']['pass1_ci'][0])}, {rate(body['a']['pass1_ci'][1])}]" in html
    assert f"[{signed(body['diff_ci'][0])}, {signed(body['diff_ci'][1])}]" in html
    # The smallest detectable difference and the verdict in words (issue 46): the same on both.
    mde = body["smallest_detectable"]
    assert figure(html, "smallest_detectable") == ("n/a" if mde is None else rate(mde))
    assert body["verdict"] and body["verdict"] in html


def test_one_run_matches_its_page(keyed, runs):
    run = runs["b"]  # infrastructure errors excluded, k capped at 3
    status, body = get(keyed, f"/api/runs/{run.pk}", **KEY)
    assert status == 200
    html = staff_client().get(f"/reports/runs/{run.pk}/").content.decode()
    assert figure(html, "mean_reward") == rate(body["mean_reward"])
    points = body["curve"]["points"]
    assert [p["k"] for p in points] == [1, 2, 3] and body["figures"]["pass_hat_k"] == [p["value"] for p in points]
    assert [figure(html, f"pass^{p['k']}") for p in points] == [rate(p["value"]) for p in points]
    assert body["figures"]["pass_hat_k"] == pytest.approx(run.pass_hat_k, abs=1e-9)
    assert figure(html, "infra_errors") == str(body["infra_errors"]) == "2"
    # The page shows cents (4 places under a dollar), the API the exact figure, which is the page's tooltip.
    assert figure(html, "cost") == money.short(Decimal(body["cost_usd"])) == "$1.14" and body["cost_usd"].startswith("1.14000000")
    assert 'title="$1.14000000 exactly"' in html
    assert figure(html, "cost_per_item") == money.short(Decimal(body["cost_per_item_usd"]))
    assert all(p["lo"] <= p["value"] <= p["hi"] for p in points)
    assert body["agent_args"]["temperature"] == 0.0 and FAKE_KEY not in json.dumps(body)  # the file held it
    items = body["items"]
    assert len(items) == 40 and sum(i["infra_error"] for i in items) == 2
    assert sum(i["correct"] for i in items) == html.count('class="cell cell-pass" title')


def test_runs_list_filters_and_pages_like_the_runs_page(keyed, runs):
    status, body = get(keyed, "/api/runs?per_page=2", **KEY)
    assert (status, body["count"], body["pages"], len(body["runs"])) == (200, 3, 2, 2)
    second = get(keyed, "/api/runs?per_page=2&page=2", **KEY)[1]
    listed = [r["id"] for r in body["runs"] + second["runs"]]
    html = staff_client().get("/reports/runs/").content.decode()
    assert listed == [int(i) for i in re.findall(r'href="/reports/runs/(\d+)/"', html)]
    filtered = get(keyed, "/api/runs?group=arm-b", **KEY)[1]
    assert [r["id"] for r in filtered["runs"]] == [runs["b"].pk]
    assert filtered["runs"][0]["pass_hat_k"] == runs["b"].pass_hat_k and filtered["runs"][0]["cost_usd"] == "1.14000000"
    today = utc_today().isoformat()
    assert get(keyed, f"/api/runs?since={today}&until={today}", **KEY)[1]["count"] == 3
    assert get(keyed, "/api/runs?until=2000-01-01", **KEY)[1]["count"] == 0
    assert get(keyed, "/api/runs?page=9", **KEY)[1]["runs"] == []


def test_spend_is_the_commands_and_the_pages(keyed, db):
    today = utc_today()
    yesterday = datetime.combine(today, datetime.min.time(), UTC) - timedelta(hours=3)
    record_trace(request_id="r1", model="openrouter/a", calls=[("a", 1_250_000)])
    record_trace(request_id="r2", model="openrouter/b", calls=[("b", 333)], started_at=yesterday)
    record_trace(request_id="r3", model="openrouter/b", status="error", calls=[("b", None)])
    since = (today - timedelta(days=1)).isoformat()
    status, body = get(keyed, f"/api/spend?since={since}&until={today}", **KEY)
    assert status == 200
    out = io.StringIO()
    call_command("spend", "--since", since, "--json", stdout=out)
    cli = json.loads(out.getvalue())
    assert (body["models"], body["total"]) == (cli["models"], cli["total"])
    # r3 failed without a cost: an error, not an unpriced call (issue 42)
    assert body["total"]["cost_usd"] == "0.00125033" and body["total"]["unpriced_calls"] == 0
    assert body["total"]["errors"] == 1
    assert body["days"] == [since, today.isoformat()]
    assert body["cost_usd_by_day"]["openrouter/b"] == ["0.00000033", "0.00000000"]
    html = staff_client().get(f"/reports/spend/?since={since}&until={today}").content.decode()
    assert figure(html, "total") == money.short(Decimal(body["total"]["cost_usd"]))  # cents; exact on hover
    assert f'data-figure="total"><span class="money" title="${body["total"]["cost_usd"]} exactly">' in html
    assert figure(html, "calls") == str(body["total"]["calls"]) == "3"
    # without a range: the page's last 14 days
    assert get(keyed, "/api/spend", **KEY)[1]["days"][0] == (today - timedelta(days=13)).isoformat()


def test_a_trace_and_its_span_tree_as_the_trace_page_shows_them(keyed, db):
    trace = record_trace(
        request_id="req-verify-1", model="marina/verify:openrouter/a", formation_label="revised",
        calls=[("a", 100), ("b", 200), ("a", None)],
    )  # fmt: skip
    status, body = get(keyed, "/api/traces/req-verify-1", **KEY)
    assert status == 200
    assert (body["request_id"], body["route"], body["formation_label"]) == ("req-verify-1", "verify", "revised")
    spans = body["spans"]
    assert [(s["name"], s["depth"], s["parent_seq"]) for s in spans] == [
        ("formation", 0, None), ("draft", 1, 1), ("review", 1, 1), ("revision", 1, 1),
    ]  # fmt: skip
    assert [s["cost_usd"] for s in spans[1:]] == ["0.00000010", "0.00000020", None]
    assert spans[2]["detail"]["verdict"] == "revise" and spans[0]["detail"] == {"verdict": "revised"}
    html = staff_client().get(f"/reports/traces/{trace.pk}/").content.decode()
    # the page's rows, in order: (seq, name, offset)
    rows = re.findall(r'data-seq="(\d+)">.*?<b>([^<]+)</b>.*?<td class="num">\+([^<]+)</td>', html, re.S)
    assert rows == [(str(s["seq"]), s["name"], duration(s["offset_ms"])) for s in spans]
    assert body["items"] == []


# --- Scoped reads: a key reads its own traces and spend -----------------------------------
BOB_KEY = "sk-marina-bob-key-0000000000000000"
OPS_KEY = "sk-marina-ops-key-0000000000000000"  # `secret:ops/*`: an operator key
BOB = {"HTTP_AUTHORIZATION": f"Bearer {BOB_KEY}"}
OPS = {"HTTP_AUTHORIZATION": f"Bearer {OPS_KEY}"}


@pytest.fixture
def tenants(keyed, settings, db):
    """alice (MARINA_KEY), bob, and the operator `ops` whose caller is `ops/carol`, one trace each."""
    settings.MODEL_API_KEYS = f"{MARINA_KEY}:alice,{BOB_KEY}:bob,{OPS_KEY}:ops/*"
    record_trace(request_id="alice-1", model="openrouter/a", key="alice", calls=[("a", 1_000)])
    record_trace(request_id="bob-1", model="openrouter/b", key="bob", calls=[("b", 20_000)])
    record_trace(request_id="carol-1", model="openrouter/c", key="ops/carol", calls=[("c", 300_000)])
    return keyed


def test_a_key_reads_its_own_traces_and_not_anothers(tenants):
    assert get(tenants, "/api/traces/bob-1", **BOB)[0] == 200
    status, body = get(tenants, "/api/traces/alice-1", **BOB)
    # another key's trace is no different from one that does not exist
    assert (status, body["error"]["message"]) == (404, "No trace with request id 'alice-1'.")
    assert get(tenants, "/api/traces/alice-1", **KEY)[0] == 200
    # an operator key reads its callers' traces, not others'
    assert get(tenants, "/api/traces/carol-1", **OPS)[0] == 200
    assert get(tenants, "/api/traces/bob-1", **OPS)[0] == 404


def test_a_key_reads_its_own_spend(tenants):
    _, bob = get(tenants, "/api/spend", **BOB)
    assert [m["model"] for m in bob["models"]] == ["openrouter/b"]
    assert bob["total"]["cost_usd"] == "0.00002000" and bob["total"]["calls"] == 1
    assert [r["requested_model"] for r in bob["rows"]] == ["openrouter/b"]
    _, ops = get(tenants, "/api/spend", **OPS)
    assert ops["total"]["cost_usd"] == "0.00030000"


def test_a_read_all_key_reads_every_keys(transactional_db, tenants):
    from passthru import auth

    secret = auth.create_key("auditor", reads_all=True)
    reader = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    for request_id in ("alice-1", "bob-1", "carol-1"):
        assert get(tenants, f"/api/traces/{request_id}", **reader)[0] == 200
    assert get(tenants, "/api/spend", **reader)[1]["total"]["cost_usd"] == "0.00032100"
    plain = {"HTTP_AUTHORIZATION": f"Bearer {auth.create_key('plain')}"}
    assert get(tenants, "/api/traces/alice-1", **plain)[0] == 404


@pytest.mark.parametrize(
    ("url", "permission"),
    [("/api/traces/alice-1", "view_trace"), ("/api/spend", "view_spenddaily"), ("/api/runs", "view_benchmarkrun")],
)
def test_staff_read_what_their_admin_permissions_allow(tenants, url, permission):
    status, body = get(staff_client(permissions=()), url)
    assert status == 403 and body["error"]["type"] == "permission_error"
    others = tuple(p for p in READ_PERMISSIONS if p != permission)
    assert get(staff_client(permissions=others), url)[0] == 403
    assert get(staff_client(permissions=(permission,)), url)[0] == 200


def test_report_pages_ask_the_admins_permissions(tenants):
    from ledger.models import Trace

    trace_pk = Trace.objects.get(request_id="alice-1").pk
    pages = ["/reports/", "/reports/traces/", f"/reports/traces/{trace_pk}/", "/reports/spend/", "/reports/spend.csv",
             "/reports/runs/", "/reports/experiments/", "/admin/ledger/trace/"]  # fmt: skip
    bare = staff_client(permissions=())
    assert [bare.get(page).status_code for page in pages] == [403] * len(pages)
    plain = staff_client(staff=False)
    assert [plain.get(page).status_code for page in pages[:-1]] == [403] * (len(pages) - 1)
    full = staff_client()
    assert [full.get(page).status_code for page in pages] == [200] * len(pages)
    tracer = staff_client(permissions=("view_trace",))
    assert [tracer.get(p).status_code for p in pages[1:4]] == [200, 200, 403]


def test_operator_names_are_matched_with_their_letter_case(tenants, settings):
    """Issue 42 C6: SQLite's LIKE ignores case, and `ops`'s /api/spend counted `OPS/…`'s calls."""
    shouty_key = "mk-" + "S" * 40
    settings.MODEL_API_KEYS += f",{shouty_key}:OPS/*"
    record_trace(request_id="dave-1", model="openrouter/d", key="OPS/dave", calls=[("d", 4_000_000)])
    shouty = {"HTTP_AUTHORIZATION": f"Bearer {shouty_key}"}
    assert get(tenants, "/api/spend", **OPS)[1]["total"]["cost_usd"] == "0.00030000"
    assert get(tenants, "/api/spend", **shouty)[1]["total"]["cost_usd"] == "0.00400000"
    assert get(tenants, "/api/traces/dave-1", **OPS)[0] == 404
    assert get(tenants, "/api/traces/carol-1", **shouty)[0] == 404
    assert get(tenants, "/api/traces/dave-1", **shouty)[0] == 200
