"""With MARINA_TRACE_BODIES off (the default), on real gunicorn servers: one
conversation through obligations + argcheck + verify, carrying a card PIN,
its two turns served by two servers on one database (SQLite file or
PostgreSQL), both exporting to a live OTLP receiver. The formations work
across the servers (the obligation read on one is re-injected by the other;
the call one nudged is a repeat on the other), and no word of the
conversation is in any column of any table, in the export or in the servers'
logs; nor is the server secret (MARINA_SECRET_KEY) that seals the state."""
from __future__ import annotations

from typing import Any

import httpx
import pytest

from passthru.formations import state
from tests.conftest import MARINA_KEY
from tests.e2e.servers import Ledger
from tests.observability.test_bodies_off import ASKED, OWED, SEED, STACK, planted, stacked_conversation
from tests.passthru.formations.play import POLICY, TOOLS, open_state

pytestmark = pytest.mark.e2e

SERVER_SECRET = "e2e-server-secret-4b1d6c0e9a7f"


def every_table(ledger: Ledger) -> str:
    """Every row of every table of the database, as text."""
    if ledger.is_sqlite:
        tables = [r[0] for r in ledger.rows("SELECT name FROM sqlite_master WHERE type = 'table'")]
    else:
        tables = [r[0] for r in ledger.rows("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
    assert "formation_state" in tables and "ledger_span" in tables
    return "\n".join(repr(ledger.rows(f'SELECT * FROM "{table}"')) for table in tables)  # names from the database


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_two_servers_keep_one_sealed_state_and_store_no_words(servers, upstream, otlp_receiver, backend, settings):
    ledger = servers.postgres() if backend == "postgres" else servers.sqlite()
    env = {"MARINA_SECRET_KEY": SERVER_SECRET, "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_receiver.base_url, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    a, b = servers.start(ledger, workers=1, **env), servers.start(ledger, workers=1, **env)
    turns = iter([a, b])

    def post(messages: list[dict[str, Any]]) -> tuple[dict[str, str], str]:
        server = next(turns)  # turn 1 on A, turn 2 on B
        response = httpx.post(
            f"{server.base_url}/v1/chat/completions",
            headers={"authorization": f"Bearer {MARINA_KEY}"},
            json={"model": STACK, "messages": messages, "tools": TOOLS, "seed": SEED},
            timeout=60,
        )
        assert response.status_code == 200, response.text
        return dict(response.headers), response.headers["x-request-id"]

    ids = stacked_conversation(post, upstream)
    spans = int(ledger.one("SELECT COUNT(*) FROM ledger_span s JOIN ledger_trace t ON s.trace_id = t.id"))
    otlp_receiver.wait_for(lambda: len(otlp_receiver.spans) >= spans + len(ids), "every span of both turns", timeout=60)
    assert {s.attributes.get("marina.request_id") for s in otlp_receiver.spans} >= set(ids)

    words = [*planted(), SERVER_SECRET]
    stored = every_table(ledger)
    assert not [w for w in words if w in stored], "no message text (nor the server secret) in the database"
    sent = b"".join(otlp_receiver.raw)
    assert not [w for w in words if w.encode() in sent], "no message text in the OTLP export"
    for server in (a, b):
        assert not [w for w in words if w in server.log()], "no message text in the server's log"

    # The state both servers shared: sealed, and opened by the conversation with the server secret.
    opening = [{"role": "system", "content": POLICY}, {"role": "user", "content": ASKED}]
    raw = ledger.one("SELECT state FROM formation_state ORDER BY version DESC, updated_at DESC LIMIT 1")
    settings.SECRET_KEY = SERVER_SECRET
    kept = open_state(raw, state.conversation("tester", "", opening, TOOLS, SEED, STACK))
    assert kept["obligations"]["items"][0]["what"] == OWED["what"]
