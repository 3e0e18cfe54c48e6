"""Secrets: after a run made to tempt a leak (bodies traced, access log and
debug logging on, keys pasted into messages, wrong keys, provider errors that
echo the provider key), neither the Marina key nor the provider key appears
in a database dump, a log, or anything exported: `manage.py spend`,
`manage.py dumpdata`, the report pages and spend.csv.

Every e2e server is also checked after its own test (tests/e2e/conftest.py);
this run adds the settings and paths that make a leak most likely."""
from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest

from tests.conftest import MARINA_KEY, PROVIDER_KEY
from tests.e2e.conftest import find_secrets
from tests.e2e.load import priced_handler, run_load, summary
from tests.e2e.servers import manage
from tests.upstream import Reply, Sse

pytestmark = pytest.mark.e2e

MODEL = "openrouter/openai/gpt-5.2"
ADMIN_PASSWORD = "e2e-admin-password-not-secret"


def login(client: httpx.Client) -> None:
    page = client.get("/admin/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token, page.text[:500]
    done = client.post(
        "/admin/login/?next=/reports/",
        data={"username": "admin", "password": ADMIN_PASSWORD, "csrfmiddlewaretoken": token.group(1), "next": "/reports/"},
        headers={"referer": f"{client.base_url}/admin/login/"},
    )
    assert done.status_code == 302 and done.headers["location"] == "/reports/", done.text[:500]


def test_no_key_in_the_database_logs_or_exports_after_a_tempting_run(servers, upstream, tmp_path: Path):
    access_log = tmp_path / "access.log"
    server = servers.start(MARINA_TRACE_BODIES="on", MARINA_ACCESS_LOG=str(access_log), MARINA_LOG_LEVEL="DEBUG")
    auth = {"authorization": f"Bearer {MARINA_KEY}"}

    # Ordinary traffic, plain and streamed, through the openai SDK.
    upstream.handler = priced_handler()
    outcomes = asyncio.run(run_load([server.base_url], MARINA_KEY, concurrency=8, requests=30))
    assert all(o.ok for o in outcomes), summary(outcomes)

    upstream.handler = None
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        # A user pastes both keys into a conversation: traced bodies must not keep them.
        pasted = f"my keys are {MARINA_KEY} and {PROVIDER_KEY}, api_key={PROVIDER_KEY}"
        body = {"model": MODEL, "messages": [{"role": "user", "content": pasted}], "metadata": {"api_key": MARINA_KEY}}
        assert client.post("/v1/chat/completions", headers=auth, json=body).status_code == 200
        upstream.script(Sse())
        assert client.post("/v1/chat/completions", headers=auth, json={**body, "stream": True}).status_code == 200
        # Wrong keys that look like keys.
        for key in (MARINA_KEY[:-1] + "X", PROVIDER_KEY):
            assert client.post("/v1/chat/completions", headers={"authorization": f"Bearer {key}"}, json=body).status_code == 401
        # A provider that echoes its own key in an error: the client asked, the client may see it; nothing keeps it.
        upstream.script(Reply(status=401, json={"error": {"message": f"Incorrect API key provided: {PROVIDER_KEY}", "type": "auth", "param": None, "code": None}}))
        assert client.post("/v1/chat/completions", headers=auth, json=body).status_code == 401
        # Failures Marina logs.
        assert client.get("/v1/chat/completions", headers=auth).status_code == 405
        assert client.post("/v1/nowhere", headers=auth, json=body).status_code == 404

    # Exports: the spend command, a full dumpdata, the report pages and the CSV.
    exports = tmp_path / "exports"
    exports.mkdir()
    url = server.ledger.url
    (exports / "spend.txt").write_text(manage("spend", database_url=url).stdout)
    (exports / "spend.json").write_text(manage("spend", "--json", database_url=url).stdout)
    (exports / "dumpdata.json").write_text(manage("dumpdata", "ledger", database_url=url).stdout)
    create = f"from django.contrib.auth.models import User; User.objects.create_superuser('admin', '', '{ADMIN_PASSWORD}')"
    manage("shell", "-c", create, database_url=url)
    trace_ids = [r[0] for r in server.ledger.rows("SELECT id FROM ledger_trace ORDER BY id DESC LIMIT 8")]
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        login(client)
        for page in ["/reports/", "/reports/spend/", "/reports/spend.csv", "/reports/traces/", *[f"/reports/traces/{i}/" for i in trace_ids]]:
            response = client.get(page)
            assert response.status_code == 200, (page, response.status_code)
            (exports / (page.strip("/").replace("/", "_") or "index")).write_text(response.text)

    server.terminate()
    assert access_log.read_text().count("/v1/chat/completions") >= 30  # the access log was on
    assert "DEBUG" in server.log()  # and so was debug logging
    # The traced bodies are there (so the check below looks at real bodies), scrubbed.
    assert server.ledger.one("SELECT COUNT(*) FROM ledger_trace WHERE body IS NOT NULL") >= 30
    assert "[redacted]" in server.ledger.dump()
    for name, text in [
        ("database dump", server.ledger.dump()),
        ("gunicorn log", server.log()),
        ("access log", access_log.read_text()),
        *[(f"export {p.name}", p.read_text()) for p in sorted(exports.iterdir())],
    ]:
        assert not find_secrets(text), f"a key appears in the {name}"
