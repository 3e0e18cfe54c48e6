"""The obligations ledger as data: adding, settling, bounds, and replaying a
turn's changes on a ledger another turn changed meanwhile."""
from __future__ import annotations

from passthru.formations.conversation import Call, read_history, result_ok, with_trailing_note
from passthru.formations.obligations.ledger import MAX_ITEMS, Ledger, replay, settle_call
from passthru.formations.tooleffect import effects

DECLARED = effects([
    {"type": "function", "function": {"name": "cancel_pending_order", "description": "Cancel an order."}},
    {"type": "function", "function": {"name": "modify_pending_order_items", "description": "Modify items."}},
    {"type": "function", "function": {"name": "get_order_details", "description": "Get an order."}},
    {"type": "function", "function": {"name": "transfer_to_human_agents", "description": "Transfer."}},
])  # fmt: skip


def item(what, target="", tools=("cancel_pending_order",), turn=1):
    return {"what": what, "target": target, "tools": list(tools), "turn": turn}


def test_add_dedupes_and_skips_turns_already_read():
    ledger = Ledger.of(None)
    assert ledger.add(item("cancel order #W1", "#W1")) == "o1"
    assert ledger.add(item("Cancel order #W1", "#w1")) is None, "same what and target"
    ledger.read(1, 0)
    assert ledger.add(item("refund", turn=1)) is None, "turn 1 was read"
    assert ledger.add(item("refund", turn=2)) == "o2"


def test_the_ledger_is_bounded_dropping_settled_first():
    ledger = Ledger.of(None)
    for i in range(MAX_ITEMS):
        ledger.add(item(f"task {i}", f"#T{i}"))
    ledger.settle("o5", "satisfied", "tool:x")
    ledger.add(item("one more", "#X"))
    ids = [i["id"] for i in ledger.items]
    assert len(ids) == MAX_ITEMS and "o5" not in ids and ids[0] == "o1"
    ledger.add(item("and another", "#Y"))
    assert [i["id"] for i in ledger.items][0] == "o2", "then the oldest"


def test_replay_on_the_same_state_gives_what_the_turn_saw():
    ledger = Ledger.of(None)
    ledger.add(item("cancel order #W1", "#W1"))
    ledger.read(1, 0)
    ledger.nudge(["o1"])
    assert replay(None, ledger.ops) == ledger.data


def test_replay_on_a_state_a_racing_turn_changed_loses_neither():
    base = Ledger.of(None)
    base.add(item("cancel order #W1", "#W1"))
    base.read(1, 0)
    stored = base.data
    # Two turns start from `stored`: one settles o1, the other reads turn 2 and nudges.
    first, second = Ledger.of(stored), Ledger.of(stored)
    first.settle("o1", "satisfied", "tool:cancel_pending_order")
    first.read(1, 1)
    second.add(item("change the address", "#W2", turn=2))
    second.read(2, 0)
    second.nudge(["o2"])
    after_first = replay(stored, first.ops)
    merged = replay(after_first, second.ops)
    assert [(i["id"], i["status"], i["nudged"]) for i in merged["items"]] == [("o1", "satisfied", False), ("o2", "open", True)]
    assert (merged["turns"], merged["calls"], merged["nudges"]) == (2, 1, 1)


def test_replay_does_not_extract_a_turn_twice_and_maps_its_ids():
    stored = Ledger.of(None).data
    a, b = Ledger.of(stored), Ledger.of(stored)
    for turn in (a, b):
        turn.add(item("cancel order #W1", "#W1"))
        turn.read(1, 0)
    b.nudge(["o1"])
    merged = replay(replay(stored, a.ops), b.ops)
    assert [(i["id"], i["nudged"]) for i in merged["items"]] == [("o1", True)]


def call(name, args, ok=True, turn=1):
    return Call("c", name, args, turn, ok)


def test_settling_by_tool_and_id():
    ledger = Ledger.of(None)
    ledger.add(item("cancel order #W1111", "#W1111"))
    ledger.add(item("cancel order #W2222", "#W2222"))
    found = settle_call(ledger.open_items(), call("cancel_pending_order", {"order_id": "#W2222"}), DECLARED)
    assert found is not None and (found.item_ids, found.status, found.by) == (["o2"], "satisfied", "tool:cancel_pending_order")
    assert settle_call(ledger.open_items(), call("cancel_pending_order", {"order_id": "#W9999"}), DECLARED) is None
    assert settle_call(ledger.open_items(), call("cancel_pending_order", {"order_id": "#W2222"}, ok=False), DECLARED) is None
    assert settle_call(ledger.open_items(), call("get_order_details", {"order_id": "#W2222"}), DECLARED) is None
    assert settle_call(ledger.open_items(), call("cancel_pending_order", {"order_id": "#W2222"}, turn=0), DECLARED) is None


def test_a_transfer_hands_off_everything_open():
    ledger = Ledger.of(None)
    ledger.add(item("cancel order #W1111", "#W1111"))
    ledger.add(item("refund", tools=()))
    found = settle_call(ledger.open_items(), call("transfer_to_human_agents", {"summary": "x"}), DECLARED)
    assert found is not None and (found.item_ids, found.status) == (["o1", "o2"], "declined")


def test_reading_the_history():
    messages = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "How can I help?"},
        {"role": "user", "content": [{"type": "text", "text": "cancel #W1"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "type": "function", "function": {"name": "cancel_pending_order", "arguments": '{"order_id": "#W1"}'}}]},
        {"role": "tool", "tool_call_id": "a", "content": '{"error": "not pending"}'},
    ]
    history = read_history(messages)
    assert [(r.turn, r.text, r.before) for r in history.requests] == [(1, "hi", ""), (2, "cancel #W1", "How can I help?")]
    assert [(c.name, c.arguments, c.turn, c.ok) for c in history.calls] == [("cancel_pending_order", {"order_id": "#W1"}, 2, False)]


def test_result_ok():
    assert result_ok('{"order_id": "#W1", "status": "cancelled"}')
    assert not result_ok("Error: no such order")
    assert not result_ok('{"status": "failed", "code": 3}')
    assert result_ok('{"status": "failed", "items": [1]}'), "a record whose status field says failed is data"


def test_the_trailing_note_lands_after_the_cacheable_prefix():
    user_last = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    assert with_trailing_note(user_last, "N") == [user_last[0], {"role": "user", "content": "q\n\nN"}]
    parts = [{"role": "user", "content": [{"type": "text", "text": "q"}]}]
    assert with_trailing_note(parts, "N")[-1]["content"] == [{"type": "text", "text": "q"}, {"type": "text", "text": "N"}]
    tool_last = [*user_last, {"role": "tool", "tool_call_id": "a", "content": "r"}]
    assert with_trailing_note(tool_last, "N") == [*tool_last, {"role": "user", "content": "N"}]
    assert with_trailing_note(tool_last, "") == tool_last
