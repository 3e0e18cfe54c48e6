"""A spool that breaks after start-up (issue 42 A7): /v1/health says so, and the
daily cap's 503 names the spool, not the database (which is well)."""
from __future__ import annotations

from ledger.spend.spool import Spool
from tests.conftest import MARINA_KEY


def test_a_broken_spool_shows_in_health_and_in_the_caps_refusal(marina, upstream, settings, tmp_path, monkeypatch):
    from ledger.spend import services

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    settings.MARINA_SPOOL_DIR = str(blocker / "spool")  # the disk under it went away, say
    broken = Spool()
    broken.open()
    monkeypatch.setattr(services, "spool", broken)  # the spool /v1/health and the cap ask, through services
    settings.MARINA_DAILY_SPEND_CAP_USD = 10

    health = marina.http.get("/v1/health", timeout=10).json()
    assert health["status"] == "degraded"
    assert health["spool"].startswith(f"MARINA_SPOOL_DIR={blocker / 'spool'} cannot be written")
    reply = marina.http.post(
        "/v1/chat/completions", headers={"authorization": f"Bearer {MARINA_KEY}"}, timeout=30,
        json={"model": "openrouter/openai/gpt-5.2", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert reply.status_code == 503
    error = reply.json()["error"]
    assert error["code"] == "spend_cap_unavailable" and "MARINA_SPOOL_DIR" in error["message"]
    assert "database" not in error["message"]
    assert not upstream.requests

    monkeypatch.setattr(services, "spool", Spool())  # a spool not yet used is well
    assert marina.http.get("/v1/health", timeout=10).json() == {"status": "ok", "engine": "marina", "spool": "ok"}
