"""The scripted upstream playing the judge model for learning: each answer is
built from the conversation it was sent, so the leaks it proposes are really
that conversation's (its user id, a name in it, a run of its words)."""
from __future__ import annotations

import json
import re
from typing import Any

from ledger.lessons.prompts import LEARN_MARKER
from tests.upstream import Reply, ScriptedUpstream, completion

CONFIRM = (
    "When the user asks for several changes to one reservation, make every requested change with its own "
    "tool call before telling the user it is done."
)
CONFIRM_AGAIN = (
    "When the user asks for several changes to one reservation, make each requested change with its own "
    "tool call before telling the user it is done."
)
POLICY = "Check the fare rules and the membership level before changing a cabin or adding checked bags."
COST = 0.0005  # dollars per judgement, as the provider reports it


def _conversation(body: dict[str, Any]) -> str:
    user = body["messages"][1]["content"]
    return user.split("CONVERSATION\n", 1)[1].split("\n\nREWARD BREAKDOWN", 1)[0]


def leak(kind: str, conversation: str) -> str:
    if kind == "id":
        token = re.search(r"\b[a-z]+_[a-z]+_\d+\b", conversation) or re.search(r"\b\d{4,}\b", conversation)
        assert token, "the conversation holds an id"
        return f"Always look up the profile {token.group()} before making any change."
    if kind == "name":
        name = re.search(r"(?<=[a-z,;:] )([A-Z][a-z]{2,})", conversation)
        assert name, "the conversation holds a name"
        return f"Address {name.group(1)} formally and confirm each change before making it."
    if kind == "date":
        return "Never change a flight departing on 2024-05-25 without a fresh search."
    words = re.sub(r"\[task:[^\]]*\]", "", conversation.split("\n", 2)[1]).split()[1:11]  # the user's opening words
    return "Remember: " + " ".join(words)


# Per call, in order: (proposals, or a raw text answer). Calls past the script answer no lesson.
SCRIPT: list[Any] = [
    [("tools", CONFIRM), ("leak", "id")],
    [("tools", CONFIRM_AGAIN), ("leak", "name")],
    [("code", POLICY), ("leak", "date")],
    [("leak", "span"), ("tools", CONFIRM)],
    "I cannot answer in JSON today.",
]


class JudgePlay:
    def __init__(self, upstream: ScriptedUpstream) -> None:
        self.bodies: list[dict[str, Any]] = []
        upstream.handler = self.handle

    def handle(self, body: Any) -> Reply:
        assert body["messages"][0]["content"].startswith(LEARN_MARKER)
        n = len(self.bodies)
        self.bodies.append(body)
        step = SCRIPT[n] if n < len(SCRIPT) else []
        if isinstance(step, str):
            content = step
        else:
            lessons = []
            for domain, rule in step:
                if domain == "leak":
                    domain, rule = "tools", leak(rule, _conversation(body))
                lessons.append({"domain": domain, "rule": rule})
            content = json.dumps({"lessons": lessons})
        return Reply(json=completion(content, cost=COST))
