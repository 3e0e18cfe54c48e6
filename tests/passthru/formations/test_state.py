"""The conversation state store: the derived key chain, immutable checkpoints
(a history sent twice reads the same state twice), expiry, and concurrent
sendings of one history."""
from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection

from passthru.formations import state
from passthru.models import ConversationState

SYSTEM = {"role": "system", "content": "rules"}
TOOLS = [{"type": "function", "function": {"name": "x"}}]


def history(n: int, tail: str = "a") -> list[dict[str, str]]:
    return [SYSTEM, *({"role": "user" if i % 2 == 0 else "assistant", "content": f"{tail}{i}"} for i in range(n))]


def stored(key: str, conv: state.Conversation) -> dict[str, Any]:
    """The row under `key`, opened with `conv`'s sealer (the row itself holds only the sealed text)."""
    raw = ConversationState.objects.get(key=key).state
    assert set(raw) == {"sealed"}
    return json.loads(conv.sealer.open(raw) or b"null")


def test_the_session_and_the_model_set_a_chain_apart():
    # The kit sends a session per run, and each arm asks for its own model id: two runs or two
    # arms with one opening and one seed never share a key. The history still tells the turns apart.
    plain = state.conversation_keys("alice", "", history(5), TOOLS, 300, "marina/obligations:m")
    run_a = state.conversation_keys("alice", "  run-a ", history(5), TOOLS, 300, "marina/obligations:m")
    run_b = state.conversation_keys("alice", "run-b", history(5), TOOLS, 300, "marina/obligations:m")
    other_arm = state.conversation_keys("alice", "run-a", history(5), TOOLS, 300, "marina/obligations:marina/argcheck:m")
    assert len(run_a) == len(plain) == 6
    assert not set(plain) & set(run_a) and not set(run_a) & set(run_b) and not set(run_a) & set(other_arm)
    assert state.conversation_keys("alice", "run-a", history(5), TOOLS, 300, "marina/obligations:m") == run_a
    assert state.conversation_keys("alice", "x" * 300, [], None) == state.conversation_keys("alice", "x" * 128 + "y", [], None)


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
def test_a_turn_reads_the_checkpoint_its_history_led_to_and_stores_its_own():
    shallow = state.conversation("alice", "", history(2), None)
    state.commit_sync(shallow, lambda s: {**s, "n": 1})
    deeper = state.conversation("alice", "", history(3), None)
    loaded = state.load_sync(deeper)
    assert (loaded.found_key, loaded.state) == (shallow.key, {"n": 1})
    state.commit_sync(deeper, lambda s: {**s, "n": s["n"] + 1})
    assert stored(deeper.key, deeper) == {"n": 2}
    assert stored(shallow.key, deeper) == {"n": 1}, "the ancestor stays for a sibling"
    assert state.load_sync(state.conversation("alice", "", history(5), None)).state == {"n": 2}


@pytest.mark.django_db(transaction=True)
def test_a_history_sent_again_reads_what_it_read_the_first_time():
    # The rerun that once found the first run's later state and made no extraction.
    shallow = state.conversation("alice", "", history(2), None)
    state.commit_sync(shallow, lambda s: {"turns": 1})
    deeper = state.conversation("alice", "", history(3), None)
    first = state.load_sync(deeper)
    assert state.commit_sync(deeper, lambda s: {"turns": s["turns"] + 1, "judged": ["cancel"]}) == {"turns": 2, "judged": ["cancel"]}
    again = state.load_sync(state.conversation("alice", "", history(3), None))
    assert (again.found_key, again.state) == (first.found_key, first.state) == (shallow.key, {"turns": 1})
    # The replay's result leaves the checkpoint as the first sending stored it.
    assert state.commit_sync(deeper, lambda s: {"turns": 99}) == {"turns": 2, "judged": ["cancel"]}
    assert state.checkpoint_sync(deeper) == {"turns": 2, "judged": ["cancel"]}
    assert state.checkpoint_sync(state.conversation("alice", "", history(4), None)) is None


@pytest.mark.django_db(transaction=True)
def test_expired_state_is_ignored(settings):
    keys = state.conversation("alice", "old", history(2), None)
    state.commit_sync(keys, lambda s: {"n": 1})
    ConversationState.objects.update(expires_at=datetime.now(UTC) - timedelta(seconds=1))
    later = state.conversation("alice", "old", history(3), None)
    assert state.load_sync(later).state == {}
    assert state.commit_sync(keys, lambda s: {"n": s.get("n", 0) + 2}) == {"n": 2}, "an expired row is written afresh"


@pytest.mark.django_db(transaction=True)
def test_concurrent_sendings_of_one_history_store_one_checkpoint():
    opening = state.conversation("alice", "busy", history(1), None)
    state.commit_sync(opening, lambda s: {"n": 1})
    keys = state.conversation("alice", "busy", history(3), None)
    senders = 4
    kept: list[dict[str, Any]] = []

    def worker(i: int) -> None:
        try:
            kept.append(state.commit_sync(keys, lambda s: {"n": s["n"] + 1, "by": i}))
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    row = ConversationState.objects.get(key=keys.key)
    assert len(kept) == senders and all(k == kept[0] for k in kept), "every sender gets the stored checkpoint"
    assert stored(keys.key, keys) == kept[0] and kept[0]["n"] == 2 and row.version == 3


def diverging(n: int, at: int, tail: str) -> list[dict[str, str]]:
    """history(n) whose messages from the at-th (1-based, non-system) on differ by `tail`."""
    same, other = history(n), history(n, tail)
    return [*same[:at], *other[at:]]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("at", [9, 10, 13, 40, 150])
def test_conversations_diverging_at_any_message_have_their_own_state(at):
    # Equal up to message at-1, different from message `at` on: the second conversation
    # must not read what the first wrote after the divergence, and must keep its own.
    shared = state.conversation("alice", "", history(at - 1), TOOLS)
    state.commit_sync(shared, lambda s: {**s, "shared": True})
    first = state.conversation("alice", "", diverging(at + 1, at, "a"), TOOLS)
    second = state.conversation("alice", "", diverging(at + 1, at, "b"), TOOLS)
    state.commit_sync(first, lambda s: {**s, "owed": "update the user's address"})
    loaded = state.load_sync(second)
    assert loaded.state == {"shared": True}, "the common prefix's state, not the other conversation's"
    state.commit_sync(second, lambda s: {**s, "owed": "refund"})
    assert state.checkpoint_sync(first) == {"shared": True, "owed": "update the user's address"}
    assert state.checkpoint_sync(second) == {"shared": True, "owed": "refund"}


@pytest.mark.django_db(transaction=True)
def test_a_long_chain_is_read_past_the_first_lookup_statement():
    # The previous turn more than CHUNK messages back: found in a later statement.
    early = state.conversation("alice", "", history(3), TOOLS)
    state.commit_sync(early, lambda s: {"n": 1})
    late = state.conversation("alice", "", history(3 + state.CHUNK + 5), TOOLS)
    assert state.load_sync(late).state == {"n": 1}
    assert state.load_sync(state.conversation("alice", "", history(3 + 2 * state.CHUNK + 5), TOOLS)).state == {"n": 1}
    assert state.commit_sync(late, lambda s: {"n": s["n"] + 1}) == {"n": 2}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("back", [1, state.CHUNK - 1, state.CHUNK])
def test_a_turn_stores_what_follows_the_checkpoint_back_at_either_side_of_the_first_statement(back):
    # commit_sync reads its own key with the CHUNK - 1 deepest ancestors, then any further back.
    early = state.conversation("alice", "", history(3), TOOLS)
    state.commit_sync(early, lambda s: {"n": 1})
    late = state.conversation("alice", "", history(3 + back), TOOLS)
    assert late.keys.index(early.key) == len(late.keys) - 1 - back
    assert state.commit_sync(late, lambda s: {"n": s.get("n", 0) + 1}) == {"n": 2}
    assert state.checkpoint_sync(late) == {"n": 2}


# --- Sealed at rest (passthru/formations/seal.py) -------------------------------------
OWED = {"obligations": {"items": [{"id": "o1", "what": "refund order 9981 to card 4111-2222, PIN 4417-9921"}]}}
OPENING = [SYSTEM, {"role": "user", "content": "Refund order 9981 to my card, PIN 4417-9921."}]


def row_text(key: str) -> str:
    return json.dumps(ConversationState.objects.get(key=key).state)


def test_the_seal_key_is_hkdf_sha256_of_the_server_secret_and_the_conversation():
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    from passthru.formations import seal

    expected = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"marina/formation-state/v1", info=b"material").derive(b"s3cret")
    assert seal.derive("s3cret", b"material") == expected
    assert seal.derive("s3cret", b"other") != expected and seal.derive("other", b"material") != expected


@pytest.mark.django_db(transaction=True)
def test_a_row_holds_only_sealed_text_and_the_conversation_opens_it():
    conv = state.conversation("alice", "", [*OPENING, {"role": "assistant", "content": "ok"}], TOOLS)
    state.commit_sync(conv, lambda s: OWED)
    text = row_text(conv.key)
    assert "9981" not in text and "4417" not in text and "refund" not in text
    assert json.loads(text)["sealed"].startswith("v1:")
    # The next turn of the same conversation (a deeper key, the same opening) reads it.
    later = state.conversation("alice", "", [*OPENING, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "go"}], TOOLS)
    assert state.load_sync(later).state == OWED
    # A conversation with another opening whose key chain were made to find this row cannot open it.
    other = state.conversation("alice", "", [SYSTEM, {"role": "user", "content": "Refund order 9981 to my card."}], TOOLS)
    forged = state.Conversation(later.keys, other.sealer)
    loaded = state.load_sync(forged)
    assert (loaded.found_key, loaded.state, loaded.unreadable) == (conv.key, {}, True)


@pytest.mark.django_db(transaction=True)
def test_without_the_server_secret_the_row_does_not_open_and_a_fallback_secret_does(settings):
    settings.SECRET_KEY = "first-secret-0123456789"
    conv = state.conversation("alice", "", OPENING, TOOLS)
    state.commit_sync(conv, lambda s: OWED)
    later = [*OPENING, {"role": "assistant", "content": "ok"}]
    settings.SECRET_KEY = "second-secret-0123456789"
    assert state.load_sync(state.conversation("alice", "", later, TOOLS)).unreadable, "another secret: no state"
    settings.SECRET_KEY_FALLBACKS = ["first-secret-0123456789"]
    rotated = state.conversation("alice", "", later, TOOLS)
    assert state.load_sync(rotated).state == OWED
    state.commit_sync(rotated, lambda s: {**s, "n": 1})  # sealed under the new secret when written
    settings.SECRET_KEY_FALLBACKS = []
    assert state.load_sync(state.conversation("alice", "", [*later, {"role": "user", "content": "go"}], TOOLS)).state == {**OWED, "n": 1}


@pytest.mark.django_db(transaction=True)
def test_a_session_row_is_sealed_by_the_conversation_too():
    conv = state.conversation("alice", "s-77", OPENING, TOOLS)
    state.commit_sync(conv, lambda s: OWED)
    assert "4417" not in row_text(conv.key) and "s-77" not in conv.key
    later = [*OPENING, {"role": "assistant", "content": "ok"}]
    assert state.load_sync(state.conversation("alice", "s-77", later, TOOLS)).state == OWED
    assert state.load_sync(state.conversation("alice", "s-78", later, TOOLS)).state == {}, "another session: another chain"
    forged = state.Conversation(state.conversation("alice", "s-77", later, TOOLS).keys, state.conversation("bob", "s-77", later, TOOLS).sealer)
    assert state.load_sync(forged).unreadable


@pytest.mark.django_db(transaction=True)
def test_a_row_written_before_sealing_is_read_and_sealed_when_next_written():
    conv = state.conversation("alice", "", OPENING, TOOLS)
    now = datetime.now(UTC)
    ConversationState.objects.create(key=conv.key, state=OWED, version=3, updated_at=now, expires_at=now + timedelta(hours=1))
    later = state.conversation("alice", "", [*OPENING, {"role": "assistant", "content": "ok"}], TOOLS)
    assert state.load_sync(later).state == OWED
    state.commit_sync(later, lambda s: {**s, "n": 1})
    assert "4417" not in row_text(later.key)
    assert state.checkpoint_sync(later) == {**OWED, "n": 1}


def test_a_worker_imports_cryptography_only_when_it_first_seals():
    """cryptography's Rust library is ~6 MB of a worker's memory; a worker that
    seals no formation state (plain calls, a burst of streams) never loads it.
    In a process of its own: this one has sealed long ago."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import marina.asgi\n"
        "print('cryptography' in sys.modules)\n"
        "from passthru.formations.seal import Sealer\n"
        "sealer = Sealer(b'conversation')\n"
        "assert sealer.open(__import__('json').loads(sealer.seal(b'{}'))) == b'{}'\n"
        "print('cryptography' in sys.modules)\n"
    )
    env = {"DJANGO_SETTINGS_MODULE": "marina.settings", "MARINA_SECRET_KEY": "test-only-secret", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
