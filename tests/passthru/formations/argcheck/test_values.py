"""The argument check's pure mechanics: value extraction, evidence grading, signatures."""
from __future__ import annotations

import json

import pytest

from passthru.formations.argcheck.values import (
    Value,
    as_date,
    canonical_number,
    channels_of,
    dates_in,
    extract_values,
    grade,
    signature,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("$1,250.50", "1250.5"), ("1250.50", "1250.5"), ("-3", "-3"), ("12,000", "12000"), ("abc", None), ("1e400", None)],
)
def test_canonical_number(raw, expected):
    assert canonical_number(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("2026-05-03", "2026-05-03"), ("2026-05-03T10:00:00Z", "2026-05-03"), ("5/3/2026", "2026-05-03"), ("2026-02-30", None), ("May 3", None)],
)
def test_as_date(raw, expected):
    assert as_date(raw) == expected


def test_dates_in_text_in_several_formats():
    text = "fly on May 3, 2026 or 4 June 2026, back 2026-06-10 or 07/01/2026; not 13/45/2026"
    assert dates_in(text) == {"2026-05-03", "2026-06-04", "2026-06-10", "2026-07-01"}


def test_extract_values_by_kind():
    args = {
        "reservation_id": "ABC123",
        "amount": "$1,250.50",
        "count": 2,  # trivial integer: skipped
        "total": 349.99,
        "date": "2026-05-03",
        "cabin": "business",
        "payment": {"card": "card ending 4821"},
        "reason": "customer changed their mind on 2026-01-01",  # free text: skipped
        "flags": [True, None],
        "nested": json.dumps({"item_ids": ["1008292230"]}),
    }
    assert extract_values(args) == [
        Value("reservation_id", "id", "abc123"),
        Value("amount", "number", "1250.5"),
        Value("total", "number", "349.99"),
        Value("date", "date", "2026-05-03"),
        Value("cabin", "option", "business"),
        Value("payment.card", "id", "4821", part=True),
        Value("nested.item_ids[0]", "number", "1008292230"),  # digits alone: a number, as in the reference
    ]


def test_extract_values_is_bounded():
    assert len(extract_values({f"k{i}": f"id{i:04d}" for i in range(100)})) == 24


def test_arguments_may_come_as_a_json_string():
    assert extract_values('{"order_id": "#W1"}') == [Value("order_id", "id", "#w1")]


MESSAGES = [
    {"role": "system", "content": "Policy: refunds go to card_9999. Economy costs $120."},
    {"role": "user", "content": "Refund $1,250.50 for order #W1234567 on May 3, 2026, business class please."},
    {"role": "assistant", "content": "I will use payment gift_card_777."},
    {"role": "tool", "content": json.dumps({"order_id": "#W1234567", "payment_method_id": "credit_card_42"})},
]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (Value("amount", "number", "1250.5"), "strong"),
        (Value("order_id", "id", "#w1234567"), "strong"),
        (Value("date", "date", "2026-05-03"), "strong"),
        (Value("cabin", "option", "business"), "strong"),
        (Value("pm", "id", "credit_card_42"), "strong"),  # a tool returned it
        (Value("pm", "id", "gift_card_777"), "weak"),  # only the assistant said it
        (Value("pm", "id", "card_9999"), "weak"),  # only the system text
        (Value("price", "number", "120"), "weak"),
        (Value("order_id", "id", "#w123456"), "none"),  # a prefix of a real id is no evidence
        (Value("cabin", "option", "basic economy"), "none"),
        (Value("cabin", "option", "business_class"), "strong"),  # underscores as spaces
    ],
)
def test_grade(value, expected):
    assert grade(value, channels_of(MESSAGES)) == expected


def test_tool_call_arguments_of_the_assistant_are_no_evidence():
    messages = [
        {"role": "user", "content": "cancel it"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "x", "arguments": '{"order_id": "#W42"}'}}]},
    ]
    assert grade(Value("order_id", "id", "#w42"), channels_of(messages)) == "none"


def test_signature_is_canonical():
    assert signature("f", '{"b": 1, "a": 2}') == signature("f", {"a": 2, "b": 1})
    assert signature("f", {"a": 1}) != signature("g", {"a": 1})
    assert len(signature("f", "not json")) == 16
