"""The leak guard on a real τ² conversation (a failed simulation of the airline fixture)."""
from __future__ import annotations

import pytest

from ledger.lessons import leakguard
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
