"""Two τ² trials of one task, run at once through a 2-worker gunicorn server:
each keeps formation state of its own. They open with the same request (τ²
repeats a task's opening in every trial) and differ in their `seed`, which τ²
sends in every request; later they differ from the 9th message on.

Before the state was keyed per message and per seed, the second trial read
the first one's row: its identical write call counted as already nudged
(`check=repeat`), and its 9th message, a request of its own, was never
extracted while it inherited the other trial's obligation."""
from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from passthru.formations.state import conversation
from tests.conftest import MARINA_KEY
from tests.passthru.formations.play import (
    CANCEL_OBLIGATION,
    OPENING,
    TOOLS,
    calls,
    extracted,
    json_reply,
    open_state,
    role_of,
    text,
)
from tests.upstream import Reply, tool_call

pytestmark = pytest.mark.e2e

MODEL = "marina/obligations:marina/argcheck:openrouter/agent"
SEEDS = {"a": 626729, "b": 373753}  # τ²'s first two trial seeds for --seed 300
INVENTED = ("cancel_pending_order", {"order_id": "#W7654321", "reason": "mistake"})  # an id nobody stated
ADDRESS = {"request": 3, "what": "update the user's address", "target": "", "tools": []}
NINTH = {
    "a": "Also update my address to 12 Elm Street, please.",
    "b": "Thanks, nothing else for now.",
}
# Messages 2-8, the same in both trials: the cancellation asked, looked up, confirmed, done.
MIDDLE: list[dict[str, Any]] = [
    {"role": "assistant", "content": None, "tool_calls": [tool_call("get_order_details", {"order_id": "#W1234567"}, "g1")]},
    {"role": "tool", "tool_call_id": "g1", "content": '{"order_id": "#W1234567", "status": "pending"}'},
    {"role": "assistant", "content": "Order #W1234567 is pending. Shall I cancel it?"},
    {"role": "user", "content": "Yes."},
    {"role": "assistant", "content": None, "tool_calls": [tool_call("cancel_pending_order", {"order_id": "#W1234567", "reason": "mistake"}, "k1")]},
    {"role": "tool", "tool_call_id": "k1", "content": '{"order_id": "#W1234567", "status": "cancelled"}'},
    {"role": "assistant", "content": "It is cancelled."},
]


class Upstream:
    """Answers each call from its role and its conversation's last user text."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str]] = []  # (role, which request the prompt holds)

    def __call__(self, body: Any) -> Reply:
        role = role_of(body)
        everything = json.dumps(body["messages"])
        about = "address" if "12 Elm Street" in everything else "opening" if "Please cancel" in everything else "other"
        with self.lock:
            self.calls.append((role, about))
        if role == "extract":
            return extracted(ADDRESS) if about == "address" else extracted(CANCEL_OBLIGATION) if about == "opening" else extracted()
        if role == "argjudge":
            return json_reply({"supported": False, "doubt": "order_id"})
        if role == "judge":
            return json_reply({"o1": "waiting", "o2": "waiting"})
        if role == "retry":
            return calls(INVENTED)
        if len(body["messages"]) <= 2:  # the first turn: a write call holding an invented id
            return calls(INVENTED)
        return text("Anything else?")


def turn(url: str, trial: str, messages: list[dict[str, Any]]) -> dict[str, str]:
    response = httpx.post(
        f"{url}/v1/chat/completions",
        headers={"authorization": f"Bearer {MARINA_KEY}"},
        json={"model": MODEL, "messages": messages, "tools": TOOLS, "seed": SEEDS[trial]},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    return {k: response.headers[k] for k in ("x-marina-obligations", "x-marina-argcheck")}


def test_two_trials_of_one_task_run_at_once_keep_their_own_state(servers, upstream):
    server = servers.start(workers=2)
    scripted = Upstream()
    upstream.handler = scripted
    a_first_done = threading.Event()
    b_first_done = threading.Event()

    def trial(name: str) -> list[dict[str, str]]:
        # Staggered so that one trial's turn runs while the other's previous one has
        # just been committed: b's first turn runs beside a's second, and so on.
        mine, other = (a_first_done, b_first_done) if name == "a" else (b_first_done, a_first_done)
        if name == "b":
            assert a_first_done.wait(60)
        first = turn(server.base_url, name, OPENING)
        mine.set()
        assert other.wait(60)
        ninth = [*OPENING, *MIDDLE, {"role": "user", "content": NINTH[name]}]
        return [first, turn(server.base_url, name, ninth)]

    with ThreadPoolExecutor(2) as pool:
        a, b = (f.result() for f in [pool.submit(trial, "a"), pool.submit(trial, "b")])

    # Each trial's invented id was nudged once, in its own turn: b's was not taken for a repeat of a's.
    nudged = "on;writes=1;checked=1;flagged=1;judged=1;nudges=1;check=nudged-kept"
    assert a[0]["x-marina-argcheck"] == nudged
    assert b[0]["x-marina-argcheck"] == nudged
    # From the 9th message on, each has its own ledger: a's new request is a's alone, and b's
    # turn read b's own 9th message (an extraction call of its own) and owes nothing new.
    assert a[1]["x-marina-obligations"].startswith("on;open=1;satisfied=1;declined=0;"), a[1]
    assert b[1]["x-marina-obligations"].startswith("on;open=0;satisfied=1;declined=0;"), b[1]
    extractions = [about for role, about in scripted.calls if role == "extract"]
    assert sorted(extractions) == ["address", "opening", "opening", "other"]
    assert server.ledger is not None
    rows = server.ledger.rows("SELECT state FROM formation_state")
    trials = [conversation("tester", "", OPENING, TOOLS, seed, MODEL) for seed in SEEDS.values()]
    states = [open_state(r[0], *trials) for r in rows]  # stored sealed, each under its own trial
    owing_address = [s for s in states if any(i["what"] == ADDRESS["what"] for i in s.get("obligations", {}).get("items", []))]
    assert len(owing_address) == 1, "only trial a's row owes the address"
