"""A trace's id is Marina's own and unique (issue 24): two clients sending the
same x-request-id made one of their traces unreachable, and the ledger's
spool needs a unique id to replay a record exactly once."""
from __future__ import annotations

from ledger.models import Trace
from tests.conftest import MARINA_KEY

MODEL = "openrouter/openai/gpt-5.2"


def test_two_clients_sending_the_same_request_id_get_two_reachable_traces(marina, upstream):
    headers = {"authorization": f"Bearer {MARINA_KEY}", "x-request-id": "job-42"}
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}]}
    with marina.client(timeout=30) as http:
        first, second = (http.post("/v1/chat/completions", json=body, headers=headers) for _ in range(2))
    assert first.status_code == second.status_code == 200
    ids = {first.headers["x-request-id"], second.headers["x-request-id"]}
    assert len(ids) == 2 and "job-42" not in ids
    for request_id in ids:
        trace = Trace.objects.get(request_id=request_id)  # each reachable by the id its client was given
        assert trace.client_request_id == "job-42"
        with marina.client(timeout=30) as http:
            shown = http.get(f"/api/traces/{request_id}", headers={"authorization": f"Bearer {MARINA_KEY}"})
        assert shown.status_code == 200, shown.text
    # What the provider saw is Marina's id (the one in the ledger), not the client's.
    assert {r.headers["x-request-id"] for r in upstream.requests} == ids
