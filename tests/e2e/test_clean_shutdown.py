"""A clean shutdown logs no error. gunicorn's SIGTERM used to leave
`Error while closing socket [Errno 9] Bad file descriptor` in the log, once per
worker: uvloop closed the listening socket and gunicorn's wrapper then closed
it again (marina/worker.py)."""
from __future__ import annotations

import re

import httpx
import pytest

from tests.conftest import MARINA_KEY

pytestmark = pytest.mark.e2e

ERROR_WORDS = re.compile(r"error|errno|traceback|exception|critical", re.IGNORECASE)


def test_sigterm_shuts_down_without_an_error_line(servers):
    server = servers.start(workers=2)
    # A served call and a keep-alive connection still open when the signal comes.
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        response = client.post(
            "/v1/chat/completions",
            headers={"authorization": f"Bearer {MARINA_KEY}"},
            json={"model": "openrouter/openai/gpt-5.2", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert response.status_code == 200
        workers = server.worker_pids()
        assert server.terminate() == 0
    log = server.log()
    assert "Shutting down: Master" in log
    for pid in workers:
        assert f"[{pid}] [INFO] Finished server process [{pid}]" in log
    assert [line for line in log.splitlines() if ERROR_WORDS.search(line)] == []
