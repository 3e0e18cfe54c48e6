"""The held-write guard, table-driven on τ²-shaped airline and retail conversations."""
from __future__ import annotations

import json
from typing import Any

import pytest

from passthru.formations.tooleffect import effects
from passthru.formations.verify.guard import (
    Conflict,
    conversation_text,
    guard_revision,
    id_tokens,
    parse_path,
    quote_found,
)


def _tool(name: str, description: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {"type": "object"}}}


def _call(name: str, args: dict[str, Any] | str, call_id: str = "call_1") -> dict[str, Any]:
    raw = args if isinstance(args, str) else json.dumps(args)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}


def _assistant(text: str | None = None, *calls: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = list(calls)
    return message


def _result(call_id: str, payload: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": json.dumps(payload)}


# --- Retail -------------------------------------------------------------------
RETAIL_TOOLS = [
    _tool("get_order_details", "Get the status and details of an order."),
    _tool("get_product_details", "Get the inventory details of a product."),
    _tool("exchange_delivered_order_items", "Exchange items in a delivered order to new items of the same product type."),
    _tool("cancel_pending_order", "Cancel a pending order."),
    _tool("transfer_to_human_agents", "Transfer the user to a human agent."),
]
RETAIL = [
    {
        "role": "system",
        "content": "# Retail agent policy\nBefore any action that changes the database (cancel, modify, return, "
        "exchange) you must list the details and get an explicit confirmation (yes) from the user.\n"
        "An exchange keeps the product type; the price difference is settled with one payment method.",
    },
    {"role": "user", "content": "Hi, I'd like to swap the keyboard from order #W2378156 for the clicky-switch version."},
    _assistant(None, _call("get_order_details", {"order_id": "#W2378156"}, "c1")),
    _result(
        "c1",
        {
            "order_id": "#W2378156",
            "status": "delivered",
            "items": [{"name": "Mechanical Keyboard", "product_id": "1656367028", "item_id": "1151293680"}],
            "payment_history": [{"payment_method_id": "credit_card_9513926", "amount": 272.33}],
        },
    ),
    _assistant(None, _call("get_product_details", {"product_id": "1656367028"}, "c2")),
    _result(
        "c2",
        {
            "variants": {
                "7706410293": {"options": {"switch type": "clicky", "backlight": "none"}, "available": True},
                "4843487907": {"options": {"switch type": "linear", "backlight": "RGB"}, "available": True},
            }
        },
    ),
    {"role": "user", "content": "Yes, please go ahead with the clicky one, and use my gift card gift_card_7245904 if needed."},
]
EXCHANGE = {
    "order_id": "#W2378156",
    "item_ids": ["1151293680"],
    "new_item_ids": ["4843487907"],
    "payment_method_id": "credit_card_9513926",
}
RETAIL_DRAFT = _assistant("I'll make the exchange now.", _call("exchange_delivered_order_items", EXCHANGE))
CLICKY = '"switch type": "clicky", "backlight": "none"'  # verbatim from the product tool result

# --- Airline ------------------------------------------------------------------
AIRLINE_TOOLS = [
    _tool("get_reservation_details", "Get the details of a reservation."),
    _tool("update_reservation_baggages", "Update the baggage information of a reservation."),
    _tool("update_reservation_passengers", "Update the passenger information of a reservation."),
    _tool("cancel_reservation", "Cancel the whole reservation."),
    _tool("send_certificate", "Send a certificate to a user. Be careful!"),
]
AIRLINE = [
    {
        "role": "system",
        "content": "# Airline agent policy\nGold members get 3 free checked bags per passenger. "
        "Each extra bag costs 50 dollars.\nBefore updating a booking, obtain explicit user confirmation (yes).",
    },
    {"role": "user", "content": "I'm sara_doe_496. Please add one checked bag to reservation ZFA04Y and fix my birth date to 1990-04-05."},
    _assistant(None, _call("get_reservation_details", {"reservation_id": "ZFA04Y"}, "a1")),
    _result(
        "a1",
        {
            "reservation_id": "ZFA04Y",
            "user_id": "sara_doe_496",
            "membership": "gold",
            "total_baggages": 1,
            "nonfree_baggages": 0,
            "passengers": [{"first_name": "Sara", "last_name": "Doe", "dob": "1990-04-15"}],
            "payment_history": [{"payment_id": "credit_card_7815826", "amount": 311}],
        },
    ),
    {"role": "user", "content": "Yes, confirmed."},
]
BAGS = {"reservation_id": "ZFA04Y", "total_baggages": 2, "nonfree_baggages": 1, "payment_id": "credit_card_7815826"}
PASSENGERS = {"reservation_id": "ZFA04Y", "passengers": [{"first_name": "Sara", "last_name": "Doe", "dob": "1990-04-15"}]}
AIRLINE_DRAFT = _assistant(
    None, _call("update_reservation_baggages", BAGS, "b1"), _call("update_reservation_passengers", PASSENGERS, "b2")
)
GOLD = "Gold members get 3 free checked bags per passenger."


def _with(base: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = json.loads(json.dumps(base))
    holder = out
    for part in path[:-1]:
        holder = holder[part]
    holder[path[-1]] = value
    return out


CASES = [
    # id, domain, revision, conflict, accepted, reason fragment
    (
        "retail: text reworded, write call kept",
        "retail",
        _assistant("Done: exchanging now.", _call("exchange_delivered_order_items", EXCHANGE, "other_id")),
        None,
        True,
        "unchanged",
    ),
    (
        "retail: write call swapped for a lookup, no conflict",
        "retail",
        _assistant(None, _call("get_product_details", {"product_id": "1656367028"})),
        None,
        False,  # the write call was dropped: not free
        "without a cited conflict",
    ),
    (
        "retail: allowed argument change",
        "retail",
        _assistant("Exchanging for the clicky one.", _call("exchange_delivered_order_items", _with(EXCHANGE, ("new_item_ids", 0), "7706410293"))),
        Conflict(CLICKY, "exchange_delivered_order_items", "new_item_ids[0]"),
        True,
        "modified exchange_delivered_order_items",
    ),
    (
        "retail: whole list cited",
        "retail",
        _assistant(None, _call("exchange_delivered_order_items", _with(EXCHANGE, ("new_item_ids",), ["7706410293"]))),
        Conflict(CLICKY, "exchange_delivered_order_items", "new_item_ids"),
        True,
        "modified",
    ),
    (
        "retail: a second argument changed",
        "retail",
        _assistant(
            None,
            _call(
                "exchange_delivered_order_items",
                _with(_with(EXCHANGE, ("new_item_ids", 0), "7706410293"), ("payment_method_id",), "gift_card_7245904"),
            ),
        ),
        Conflict(CLICKY, "exchange_delivered_order_items", "new_item_ids[0]"),
        False,
        "beyond the cited argument",
    ),
    (
        "retail: invented id",
        "retail",
        _assistant(None, _call("exchange_delivered_order_items", _with(EXCHANGE, ("new_item_ids", 0), "9998887776"))),
        Conflict(CLICKY, "exchange_delivered_order_items", "new_item_ids[0]"),
        False,
        "9998887776",
    ),
    (
        "retail: quote not in the conversation",
        "retail",
        _assistant(None, _call("exchange_delivered_order_items", _with(EXCHANGE, ("new_item_ids", 0), "7706410293"))),
        Conflict("Customers always prefer clicky switches.", "exchange_delivered_order_items", "new_item_ids[0]"),
        False,
        "not found in the conversation",
    ),
    (
        "retail: quote too short",
        "retail",
        _assistant(None, _call("exchange_delivered_order_items", _with(EXCHANGE, ("new_item_ids", 0), "7706410293"))),
        Conflict("clicky", "exchange_delivered_order_items", "new_item_ids[0]"),
        False,
        "not found in the conversation",
    ),
    (
        "retail: conflict names another call",
        "retail",
        _assistant(None, _call("exchange_delivered_order_items", _with(EXCHANGE, ("new_item_ids", 0), "7706410293"))),
        Conflict(CLICKY, "cancel_pending_order", "new_item_ids[0]"),
        False,
        "does not name it",
    ),
    (
        "retail: conflict cites no argument",
        "retail",
        _assistant(None, _call("exchange_delivered_order_items", _with(EXCHANGE, ("new_item_ids", 0), "7706410293"))),
        Conflict(CLICKY, "exchange_delivered_order_items", None),
        False,
        "cites no argument",
    ),
    (
        "retail: dropped call named (deferred for a confirmation)",
        "retail",
        _assistant("Before I proceed: exchange 1151293680 for 4843487907. Shall I go ahead (yes/no)?"),
        Conflict("get an explicit confirmation (yes) from the user", "exchange_delivered_order_items", None),
        True,
        "dropped exchange_delivered_order_items",
    ),
    (
        "retail: dropped call not named",
        "retail",
        _assistant("Shall I go ahead (yes/no)?"),
        Conflict("get an explicit confirmation (yes) from the user", "cancel_pending_order", None),
        False,
        "drops exchange_delivered_order_items but the conflict does not name it",
    ),
    (
        "retail: dropped without a conflict",
        "retail",
        _assistant("Shall I go ahead (yes/no)?"),
        None,
        False,
        "without a cited conflict",
    ),
    (
        "retail: arguments that are not JSON",
        "retail",
        _assistant(None, _call("exchange_delivered_order_items", "order_id=#W2378156")),
        Conflict(CLICKY, "exchange_delivered_order_items", "new_item_ids[0]"),
        False,
        "not JSON",
    ),
    # --- airline ---
    (
        "airline: allowed argument change (a number, not an id)",
        "airline",
        _assistant(None, _call("update_reservation_baggages", _with(BAGS, ("nonfree_baggages",), 0), "b1"), _call("update_reservation_passengers", PASSENGERS, "b2")),
        Conflict(GOLD, "update_reservation_baggages", "nonfree_baggages"),
        True,
        "modified update_reservation_baggages",
    ),
    (
        "airline: nested argument path",
        "airline",
        _assistant(None, _call("update_reservation_baggages", BAGS, "b1"), _call("update_reservation_passengers", _with(PASSENGERS, ("passengers", 0, "dob"), "1990-04-05"), "b2")),
        Conflict("fix my birth date to 1990-04-05", "update_reservation_passengers", "passengers[0].dob"),
        True,
        "modified update_reservation_passengers",
    ),
    (
        "airline: invented date in the cited argument",
        "airline",
        _assistant(None, _call("update_reservation_baggages", BAGS, "b1"), _call("update_reservation_passengers", _with(PASSENGERS, ("passengers", 0, "dob"), "1991-01-01"), "b2")),
        Conflict("fix my birth date to 1990-04-05", "update_reservation_passengers", "passengers[0].dob"),
        False,
        "1991-01-01",
    ),
    (
        "airline: a second argument changed",
        "airline",
        _assistant(None, _call("update_reservation_baggages", {**BAGS, "nonfree_baggages": 0, "total_baggages": 4}, "b1"), _call("update_reservation_passengers", PASSENGERS, "b2")),
        Conflict(GOLD, "update_reservation_baggages", "nonfree_baggages"),
        False,
        "beyond the cited argument",
    ),
    (
        "airline: invented payment id",
        "airline",
        _assistant(None, _call("update_reservation_baggages", _with(BAGS, ("payment_id",), "gift_card_0000001"), "b1"), _call("update_reservation_passengers", PASSENGERS, "b2")),
        Conflict("Each extra bag costs 50 dollars.", "update_reservation_baggages", "payment_id"),
        False,
        "gift_card_0000001",
    ),
    (
        "airline: two calls changed under one citation",
        "airline",
        _assistant(None, _call("update_reservation_baggages", _with(BAGS, ("nonfree_baggages",), 0), "b1"), _call("update_reservation_passengers", _with(PASSENGERS, ("passengers", 0, "dob"), "1990-04-05"), "b2")),
        Conflict(GOLD, "update_reservation_baggages", "nonfree_baggages"),
        False,
        "modifies update_reservation_passengers but the conflict does not name it",
    ),
    (
        "airline: reordered write calls",
        "airline",
        _assistant(None, _call("update_reservation_passengers", PASSENGERS, "b2"), _call("update_reservation_baggages", BAGS, "b1")),
        Conflict(GOLD, "update_reservation_baggages", None),
        False,
        "reorders",
    ),
    (
        "airline: added call named",
        "airline",
        _assistant(None, _call("update_reservation_baggages", BAGS, "b1"), _call("update_reservation_passengers", PASSENGERS, "b2"), _call("send_certificate", {"user_id": "sara_doe_496", "amount": 50}, "b3")),
        Conflict("Each extra bag costs 50 dollars.", "send_certificate", None),
        True,
        "added send_certificate",
    ),
    (
        "airline: added call not named",
        "airline",
        _assistant(None, _call("update_reservation_baggages", BAGS, "b1"), _call("update_reservation_passengers", PASSENGERS, "b2"), _call("cancel_reservation", {"reservation_id": "ZFA04Y"}, "b3")),
        Conflict(GOLD, "update_reservation_baggages", None),
        False,
        "adds cancel_reservation but the conflict does not name it",
    ),
    (
        "airline: added call with an invented id",
        "airline",
        _assistant(None, _call("update_reservation_baggages", BAGS, "b1"), _call("update_reservation_passengers", PASSENGERS, "b2"), _call("send_certificate", {"user_id": "sara_doe_497", "amount": 50}, "b3")),
        Conflict("Each extra bag costs 50 dollars.", "send_certificate", None),
        False,
        "sara_doe_497",
    ),
]

SETTINGS = {
    "retail": (RETAIL, RETAIL_TOOLS, RETAIL_DRAFT),
    "airline": (AIRLINE, AIRLINE_TOOLS, AIRLINE_DRAFT),
}


@pytest.mark.parametrize(("domain", "revision", "conflict", "accepted", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_guard(domain, revision, conflict, accepted, reason):
    conversation, tools, draft = SETTINGS[domain]
    decision = guard_revision(
        draft=draft, revision=revision, conflict=conflict, conversation=conversation, effects=effects(tools)
    )
    assert decision.accepted is accepted, decision.reason
    if decision.invented:
        # The ids a revision made up are named apart (traced only with bodies on), never in the
        # reason, which is traced with bodies off too (docs/security.md).
        assert reason in decision.invented
        assert not any(made_up in decision.reason for made_up in decision.invented), decision.reason
    else:
        assert reason in decision.reason


def test_read_only_calls_and_text_change_freely():
    draft = _assistant("Let me look.", _call("get_order_details", {"order_id": "#W0000000"}))
    revision = _assistant("Checking your order.", _call("get_product_details", {"product_id": "1656367028"}))
    decision = guard_revision(draft=draft, revision=revision, conflict=None, conversation=RETAIL, effects=effects(RETAIL_TOOLS))
    assert decision.accepted and not decision.writes_changed


def test_quote_is_normalised_before_matching():
    context = conversation_text(RETAIL)
    assert quote_found("  GET AN EXPLICIT   confirmation (yes)\nfrom the user ", context)
    assert quote_found("“switch type: clicky, backlight: none”", context)  # quote marks dropped
    assert quote_found("...swap the keyboard from order #W2378156...", context)
    assert not quote_found("swap the keyboard from order #W9999999", context)


def test_id_tokens():
    assert id_tokens({"a": "#W2378156", "b": ["gift_card_1", "2024-05-01"], "n": 3, "big": 12345}) == {
        "W2378156",  # a leading # is not part of the id: "order W2378156" still matches
        "gift_card_1",
        "2024-05-01",
        "12345",
    }
    assert id_tokens({"qty": 2, "price": "272.33", "note": "two bags", "small": "12"}) == set()


def test_parse_path():
    assert parse_path("new_item_ids[0]") == ["new_item_ids", 0]
    assert parse_path("passengers[1].dob") == ["passengers", 1, "dob"]
    assert parse_path("$.payment.payment_id") == ["payment", "payment_id"]
    assert parse_path("items[x]") is None
    assert parse_path("") is None
