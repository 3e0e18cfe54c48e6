"""One rule across the command line, GET /api and the pages: a run (or group)
compared with itself is refused everywhere with the same words (it was exit 0
with a warning, 200 and 400); /api/spend's range errors name their `param` as
/api/runs's do; `spend --json` and /api/spend share their default range."""
from __future__ import annotations

import io
import json
from datetime import UTC, date, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command

from ledger.spend.selectors import utc_today
from tests.ledger.report_builders import record_trace
from tests.marina.test_read_api import KEY, get, keyed, runs, staff_client  # noqa: F401  (fixtures)

SAME_RUN = "A and B are the same run (#{}): pick two different runs"


def test_a_run_compared_with_itself_is_refused_alike_everywhere(keyed, runs):  # noqa: F811
    run = runs["a"].pk
    with pytest.raises(CommandError) as refused:
        call_command("compare", str(run), str(run), stdout=io.StringIO())
    assert refused.value.returncode == 2 and str(refused.value) == SAME_RUN.format(run)
    status, body = get(keyed, f"/api/compare?a={run}&b={run}", **KEY)
    assert status == 400 and body["error"]["message"] == SAME_RUN.format(run) and body["error"]["param"] == "b"
    page = staff_client().get(f"/reports/compare/?mode=runs&run_a={run}&run_b={run}")
    assert page.status_code == 400 and SAME_RUN.format(run) in page.content.decode()


def test_a_group_compared_with_itself_is_refused_alike_everywhere(keyed, runs):  # noqa: F811
    same = "A and B are the same group ('arm-a'): pick two different groups"
    with pytest.raises(CommandError) as refused:
        call_command("compare", "--group", "arm-a", "--group", "arm-a", stdout=io.StringIO())
    assert refused.value.returncode == 2 and str(refused.value) == same
    status, body = get(keyed, "/api/compare?group_a=arm-a&group_b=arm-a", **KEY)
    assert (status, body["error"]["message"], body["error"]["param"]) == (400, same, "group_b")
    page = staff_client().get("/reports/compare/?mode=groups&group_a=arm-a&group_b=arm-a")
    assert page.status_code == 400 and same.replace("'", "&#x27;") in page.content.decode()


@pytest.mark.parametrize("query", ["since=2026-12-05&until=2026-12-01", "since=2024-01-01&until=2026-12-01"])
def test_spend_range_errors_name_their_param_like_runs(keyed, db, query):  # noqa: F811
    status, body = get(keyed, f"/api/spend?{query}", **KEY)
    assert status == 400 and body["error"]["param"] == "since"
    status, body = get(keyed, "/api/runs?since=2026-12-05&until=2026-12-01", **KEY)
    assert status == 400 and body["error"]["param"] == "since"


def test_spend_json_and_api_spend_share_their_default_range(keyed, db):  # noqa: F811
    today = utc_today()
    for days_ago in (0, 5, 13, 14, 30):  # the last 14 days include 13 days ago, not 14
        record_trace(request_id=f"r{days_ago}", model="openrouter/a", calls=[("a", 1_000_000)],
                     started_at=record_at(today - timedelta(days=days_ago)))  # fmt: skip
    status, api = get(keyed, "/api/spend", **KEY)
    assert status == 200
    out = io.StringIO()
    call_command("spend", "--json", stdout=out)
    cli = json.loads(out.getvalue())
    assert (cli["first_day"], cli["last_day"]) == (api["first_day"], api["last_day"])
    assert (cli["models"], cli["total"]) == (api["models"], api["total"])
    assert cli["total"]["calls"] == 3


def record_at(day: date) -> datetime:
    return datetime.combine(day, datetime.min.time(), UTC) + timedelta(hours=12)
