"""The conversation state store: the derived key chain, expiry, and concurrent
turns of one conversation that never lose an update."""
from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from passthru.formations import state
from passthru.models import ConversationState

SYSTEM = {"role": "system", "content": "rules"}
TOOLS = [{"type": "function", "function": {"name": "x"}}]


def history(n: int, tail: str = "a") -> list[dict[str, str]]:
    return [SYSTEM, *({"role": "user" if i % 2 == 0 else "assistant", "content": f"{tail}{i}"} for i in range(n))]


def test_the_session_header_is_the_key():
    assert state.conversation_keys("alice", "  sim-7 ", history(5), TOOLS) == ["alice|s:sim-7"]
    assert state.conversation_keys("alice", "x" * 300, [], None) == ["alice|s:" + "x" * 128]


def test_the_derived_chain_has_a_key_per_message():
    keys = state.conversation_keys("alice", "", history(13), TOOLS)
    assert [k.rpartition("@")[2] if "@" in k else "" for k in keys] == ["", *(str(n) for n in range(1, 14))]
    assert all(k.startswith("alice|h:") for k in keys)
    assert len(state.conversation_keys("alice", "", history(500), TOOLS)) == 501, "no length limit"


def test_the_seed_separates_trials_with_one_opening():
    # τ² sends each trial's seed in every request: two trials of one task are two conversations.
    a = state.conversation_keys("alice", "", history(4), TOOLS, 626729)
    b = state.conversation_keys("alice", "", history(4), TOOLS, 373753)
    assert not set(a) & set(b)
    assert state.conversation_keys("alice", "", history(4), TOOLS, 626729) == a
    assert state.conversation_keys("alice", "", history(4), TOOLS, True) == state.conversation_keys("alice", "", history(4), TOOLS)


def test_the_chain_depends_on_caller_system_tools_and_history():
    base = state.conversation_keys("alice", "", history(4), TOOLS)
    assert state.conversation_keys("alice", "", history(4), TOOLS) == base
    assert state.conversation_keys("bob", "", history(4), TOOLS)[0] != base[0]
    assert state.conversation_keys("alice", "", history(4), None)[0] != base[0]
    diverged = state.conversation_keys("alice", "", [*history(2), {"role": "user", "content": "other"}, *history(4)[4:]], TOOLS)
    assert diverged[:3] == base[:3] and diverged[3] != base[3], "shared until the history diverges"


@pytest.mark.django_db(transaction=True)
def test_state_is_read_under_the_deepest_key_and_copied_forward():
    shallow = state.conversation_keys("alice", "", history(2), None)
    state.commit_sync(shallow, lambda s: {**s, "n": 1})
    deeper = state.conversation_keys("alice", "", history(3), None)
    loaded = state.load_sync(deeper)
    assert (loaded.found_key, loaded.state) == (shallow[-1], {"n": 1})
    state.commit_sync(deeper, lambda s: {**s, "n": s["n"] + 1})
    assert ConversationState.objects.get(key=deeper[-1]).state == {"n": 2}
    assert ConversationState.objects.get(key=shallow[-1]).state == {"n": 1}, "the ancestor stays for a sibling"


@pytest.mark.django_db(transaction=True)
def test_expired_state_is_ignored(settings):
    keys = ["alice|s:old"]
    state.commit_sync(keys, lambda s: {"n": 1})
    ConversationState.objects.update(expires_at=datetime.now(UTC) - timedelta(seconds=1))
    assert state.load_sync(keys).state == {}
    assert state.commit_sync(keys, lambda s: {"n": s.get("n", 0) + 1}) == {"n": 1}


@pytest.mark.django_db(transaction=True)
def test_concurrent_turns_never_lose_an_update():
    keys = ["alice|s:busy"]
    turns, per_thread = 4, 10

    def worker() -> None:
        try:
            for _ in range(per_thread):
                state.commit_sync(keys, lambda s: {**s, "n": s.get("n", 0) + 1})
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(turns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    row = ConversationState.objects.get(key=keys[0])
    assert row.state == {"n": turns * per_thread} and row.version == turns * per_thread


def diverging(n: int, at: int, tail: str) -> list[dict[str, str]]:
    """history(n) whose messages from the at-th (1-based, non-system) on differ by `tail`."""
    same, other = history(n), history(n, tail)
    return [*same[:at], *other[at:]]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("at", [9, 10, 13, 40, 150])
def test_conversations_diverging_at_any_message_have_their_own_state(at):
    # Equal up to message at-1, different from message `at` on: the second conversation
    # must not read what the first wrote after the divergence, and must keep its own.
    shared = state.conversation_keys("alice", "", history(at - 1), TOOLS)
    state.commit_sync(shared, lambda s: {**s, "shared": True})
    first = state.conversation_keys("alice", "", diverging(at + 1, at, "a"), TOOLS)
    second = state.conversation_keys("alice", "", diverging(at + 1, at, "b"), TOOLS)
    state.commit_sync(first, lambda s: {**s, "owed": "update the user's address"})
    loaded = state.load_sync(second)
    assert loaded.state == {"shared": True}, "the common prefix's state, not the other conversation's"
    state.commit_sync(second, lambda s: {**s, "owed": "refund"})
    assert state.load_sync(first).state == {"shared": True, "owed": "update the user's address"}
    assert state.load_sync(second).state == {"shared": True, "owed": "refund"}


@pytest.mark.django_db(transaction=True)
def test_a_long_chain_is_read_past_the_first_lookup_statement():
    # The previous turn more than CHUNK messages back: found in a later statement.
    early = state.conversation_keys("alice", "", history(3), TOOLS)
    state.commit_sync(early, lambda s: {"n": 1})
    late = state.conversation_keys("alice", "", history(3 + state.CHUNK + 5), TOOLS)
    assert state.load_sync(late).state == {"n": 1}
    assert state.commit_sync(late, lambda s: {"n": s["n"] + 1}) == {"n": 2}
