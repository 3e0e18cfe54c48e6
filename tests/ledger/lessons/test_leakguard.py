"""The leak guard on a real τ² conversation (a failed simulation of the airline fixture)."""
from __future__ import annotations

import pytest

from ledger.lessons import leakguard, spellings
from ledger.lessons.failures import failures, read
from tests.ledger.tau2files import results


@pytest.fixture(scope="module")
def evidence() -> leakguard.Evidence:
    path = results("airline-oracle")
    _, failed = read(path, progress=False)
    first = next(f for f in failures(path, set(failed)) if f.item_id == "17#0")
    return leakguard.evidence_of(first.messages, first.reward_info)


@pytest.mark.parametrize(
    "rule, reason",
    [
        ("Check reservation FQ8APE before changing anything in it.", "quotes an id from the conversation"),
        ("Look up the profile of omar_rossi_1241 before any update.", "quotes an id from the conversation"),
        ("Pay with gift_card_8190333 when the user has no other method.", "quotes an id from the conversation"),
        ("Change flights only for trips dated 2024-05-25 or later.", "names a date"),
        ("Never rebook a flight departing May 25 without asking first.", "names a date"),
        ("Greet Omar by name and confirm each change before making it.", "names a name from the conversation"),
        ("For trips to Chicago always offer the cheapest economy fare first.", "names a name from the conversation"),
        ("Do it.", "too short"),
        ("x" * 301, "longer than 300 characters"),
    ],
)
def test_a_rule_holding_a_detail_of_the_conversation_is_refused(evidence, rule, reason):
    assert leakguard.refusal(rule, evidence) == reason


def test_an_amount_from_the_conversation_is_refused_and_small_policy_numbers_pass():
    found = leakguard.Evidence()
    found.add_text("The fare difference is $1,234.50 and you have 3 bags; refund within 24 hours.")
    assert leakguard.refusal("Tell the user the fare difference of 1234.5 before charging it.", found) == (
        "quotes an amount from the conversation"
    )
    assert leakguard.refusal("Allow at most 3 free bags and refund only within 24 hours.", found) == ""


@pytest.mark.parametrize(
    "rule",
    [
        "Read the card PIN 4417-9921 back to the user before paying.",  # as written
        "Read the card PIN 44179921 back to the user before paying.",  # its digits regrouped
        "Read the card PIN 4417 9921 back to the user before paying.",
        "Charge card 4111111111111111 only after the user confirms it.",
        "Charge card 4111-1111-1111-1111 only after the user confirms it.",
    ],
)
def test_a_secret_number_is_refused_however_its_digits_are_grouped(rule):
    found = leakguard.Evidence()
    found.add_text("My card PIN is 4417-9921, card number 4111 1111 1111 1111.")
    assert leakguard.refusal(rule, found).startswith("quotes "), rule
    # The rule about it, without its value, is general and passes.
    assert leakguard.refusal("Never ask for or repeat a card PIN; payments need only the card id.", found) == ""


def test_a_long_verbatim_span_is_refused_but_a_short_overlap_passes(evidence):
    verbatim = "Remember: for your upcoming trip from New York to Chicago you want to add bags."
    assert leakguard.refusal(verbatim, evidence) in (
        f"repeats {leakguard.SPAN_WORDS}+ words of the conversation verbatim",
        "names a name from the conversation",
    )
    # Without the names, the span itself is what is caught.
    found = leakguard.Evidence()
    found.add_text("please change the passenger to yourself and upgrade it to economy class today")
    assert leakguard.refusal("Always change the passenger to yourself and upgrade it to economy class.", found) == (
        f"repeats {leakguard.SPAN_WORDS}+ words of the conversation verbatim"
    )
    assert leakguard.refusal("When asked to upgrade to economy class, check the fare rules first.", found) == ""


def test_a_general_rule_naming_tools_passes(evidence):
    rule = (
        "When the user asks for several changes to one reservation, make every one of them "
        "(update_reservation_flights, update_reservation_passengers, update_reservation_baggages) before ending."
    )
    assert leakguard.refusal(rule, evidence) == ""


def test_a_word_also_written_in_lower_case_is_no_name():
    found = leakguard.Evidence()
    found.add_text("Your fare is Basic Economy, and basic economy tickets cannot be changed. You fly to Denver.")
    assert leakguard.refusal("Basic economy tickets may not be modified; offer a cancellation instead.", found) == ""
    assert leakguard.refusal("Flights to Denver need a fresh search before any change.", found) == (
        "names a name from the conversation"
    )


@pytest.fixture(scope="module")
def truth() -> set[str]:
    path = results("airline-oracle")
    _, failed = read(path, progress=False)
    first = next(f for f in failures(path, set(failed)) if f.item_id == "17#0")
    assert first.criteria is not None, "the task's expected actions come with the failure"
    return leakguard.ground_truth(first.criteria, first.reward_info, first.messages)


@pytest.mark.parametrize(
    "rule",
    [
        # What the lexical checks let through: the expected actions' values, exactly.
        "Cancel or change FQ8APE only after reading it.",  # an id in the expected arguments
        "Rebook onto HAT138 when the original flight is full.",  # a flight number in them
        "Always ask before changes made on the 25th of the month.",  # the expected date, spelled otherwise
        "Passengers named rossi must confirm their date of birth.",  # a name, lower-cased
        "Flights out of EWR need the passenger list confirmed first.",  # an output of an expected call
        "Use gift_card_8190333 style payment ids exactly as the profile lists them.",
    ],
)
def test_a_rule_holding_a_ground_truth_value_is_refused_exactly(truth, rule):
    assert leakguard.truth_refusal(rule, truth) == "holds a ground-truth value"


def test_general_rules_pass_the_ground_truth_check(truth):
    assert {"fq8ape", "hat056", "2024-05-25", "25th", "may 25", "omar", "rossi", "gift_card_8190333", "ewr"} <= truth
    for rule in (
        "Before changing passengers, read the reservation and confirm each name with the user.",
        "Update bags and flights with separate calls, each confirmed by the user first.",
        "Basic economy reservations cannot change flights; say so and offer a cancellation instead.",
    ):
        assert leakguard.truth_refusal(rule, truth) == "", rule


# --- Other spellings of one value (ledger/lessons/spellings.py) --------------------------
CRITERIA = {
    "actions": [
        {"name": "update_reservation_flights", "arguments": {"reservation_id": "K1NW8N", "date": "2024-05-26", "payment_id": "credit_card_4421"}},
        {"name": "send_certificate", "arguments": {"user_id": "mia_li_3668", "amount": 348}},
    ],
}
CONVERSATION = [
    {"role": "user", "content": "I need to move my trip, reservation K1NW8N."},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "name": "search_direct_flight", "arguments": {}}]},
    {"role": "tool", "id": "c1", "content": '[{"flight_number": "HAT041", "origin": "ATL", "destination": "PHL", "price": 348}]'},
    {"role": "assistant", "content": "The later flight leaves Atlanta in the evening. Shall I book it?"},
]


@pytest.mark.parametrize(
    "rule",
    [
        "Book the later flight on 26 May when the user asks for the evening.",  # 2024-05-26
        "Book the later flight on the 26th of May when the user asks for the evening.",
        "Charge the remaining three hundred forty-eight dollars to the card on file.",  # 348
        "Charge the remaining three hundred and forty eight dollars to the card on file.",
        "Reservations like K1N-W8N need their flights read before any change.",  # K1NW8N
        "Reservations like K1N W8N need their flights read before any change.",
    ],
)
def test_the_ground_truth_in_another_spelling_is_refused(rule):
    truth = leakguard.ground_truth(CRITERIA, None, CONVERSATION)
    assert leakguard.truth_refusal(rule, truth) == "holds a ground-truth value", rule


@pytest.mark.parametrize(
    "rule, reason",
    [
        ("Book the later flight on 26 May when the user asks for the evening.", "names a date"),
        ("Charge the remaining three hundred forty-eight dollars to the card on file.", "quotes an amount from the conversation"),
        ("Reservations like K1N-W8N need their flights read before any change.", "quotes an id from the conversation"),
        ("Flights from ATL to PHL sell out: offer the later one at once.", "names a code from the conversation's tool results"),
    ],
)
def test_the_conversation_in_another_spelling_is_refused(rule, reason):
    assert leakguard.refusal(rule, leakguard.evidence_of(CONVERSATION)) == reason


def test_general_rules_still_pass_the_normalised_checks():
    truth = leakguard.ground_truth(CRITERIA, None, CONVERSATION)
    evidence = leakguard.evidence_of(CONVERSATION)
    for rule in (
        "Read the reservation before changing flights, and confirm the new date with the user.",
        "Offer one certificate at most, and only to a user whose flight was delayed.",
        "Charge a fare difference only after the user says yes; refund within 24 hours.",
        "Check the IATA code of each airport against the search result before booking.",  # no code of the results
        "Allow at most three free bags and twenty-four hours for a free cancellation.",  # small counts in words
    ):
        assert leakguard.truth_refusal(rule, truth) == "", rule
        assert leakguard.refusal(rule, evidence) == "", rule


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2024-05-26", {(5, 26)}), ("26 May", {(5, 26)}), ("the 26th of May, 2024", {(5, 26)}),
        ("May 26th", {(5, 26)}), ("Sept. 3", {(9, 3)}), ("05/26", {(5, 26)}), ("26.05.2024", {(5, 26)}),
        ("05/06", {(5, 6), (6, 5)}), ("12.50 dollars", set()), ("3 markets", set()), ("13/13", set()),
    ],
)
def test_dates_read_in_any_order_and_spelling(text, expected):
    assert spellings.dates(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("three hundred forty-eight dollars", {348}), ("three hundred and forty eight", {348}),
        ("twelve thousand five hundred", {12500}), ("a hundred dollars", {100}), ("nineteen hundred", {1900}),
        ("one reservation and two bags", {1, 2}), ("seventy-five thousand", {75000}), ("often", set()),
    ],
)
def test_numbers_in_words(text, expected):
    assert spellings.numbers_in_words(text) == expected


def test_ids_compact_and_codes():
    assert spellings.compact("K1N-W8N") == spellings.compact("k1n_w8n") == "k1nw8n"
    assert "k1nw8n" in spellings.compact_windows("like K1N W8N here")
    assert spellings.codes("Flights from ATL to PHL, OK, Atlanta") == {"ATL", "PHL"}
