"""kernel.conversation: the conversation identity's hashes are stored in every
ledger (traces' conv_opening and conv_system) and computed again by the τ²
importer from a run's messages, so they must never change: these bodies' values
were computed once and are pinned here."""
from __future__ import annotations

from typing import Any

import pytest

from kernel.conversation import Identity, digest, identify, opening_hash

AIRLINE = "# Airline policy\n" + "Each rule, numbered. " * 500  # longer than one hash block of hashlib's (2 KB)

PINNED: list[tuple[dict[str, Any], Identity]] = [
    (
        {"seed": 300, "messages": [
            {"role": "system", "content": "You are a helpful airline agent.\n"},
            {"role": "assistant", "content": "Hi! How can I help you today?"},
            {"role": "user", "content": "I want to change my flight."},
            {"role": "assistant", "content": None, "tool_calls": []},
            {"role": "tool", "content": "{}"},
        ]},
        Identity(seed=300, opening="67225d5458a4cfda", system="69543670d8ecdd8f"),
    ),
    (
        {"seed": True, "messages": [
            {"role": "developer", "content": [
                {"type": "text", "text": "Rule one."}, {"type": "image_url"}, {"type": "text", "text": " Rule two. "},
            ]},
            {"role": "system", "content": "Second system."},
            {"role": "user", "content": [{"type": "text", "text": "héllo ✓ 🙂"}]},
        ]},
        Identity(seed=None, opening="ccb5071bf08bb634", system="4ccd054799e9e9bd"),
    ),
    (
        {"seed": 2**63, "messages": [
            {"role": "user", "content": "lone \ud800 surrogate\x00nul"},
            "not a dict",
            {"role": 3, "content": "x"},
            {"role": "assistant", "content": 7},
            {"role": "user", "content": "third"},
        ]},
        Identity(seed=None, opening="e9d144d338f83a96", system=""),
    ),
    (
        {"messages": [
            {"role": "system", "content": AIRLINE},
            {"role": "assistant", "content": "Hi!"},
            {"role": "user", "content": "Cancel it."},
        ]},
        Identity(seed=None, opening="4c4b000eb58d7a22", system="67749545c66d8eb7"),
    ),
    ({"seed": -5}, Identity(seed=-5, opening="", system="")),
]  # fmt: skip


@pytest.mark.parametrize(("body", "identity"), PINNED)
def test_the_identity_of_a_body_never_changes(body: dict[str, Any], identity: Identity) -> None:
    assert identify(body) == identity


def test_digest_and_opening_hash_never_change() -> None:
    assert digest([]) == "e3b0c44298fc1c14"  # SHA-256 of nothing
    assert (digest(["a"]), digest(["", ""]), digest(iter(["a", "b"]))) == ("ffe9aaeaa2a2d504", "96a296d224f285c6", "8fb20ef63ced4145")
    assert opening_hash([]) == "" and opening_hash([("user", "x")]) == "9fec3089a482f080"
    # At most two pairs count: a third changes nothing.
    assert opening_hash(iter([("assistant", "Hi!"), ("user", "Cancel it."), ("assistant", "Done.")])) == "4c4b000eb58d7a22"
