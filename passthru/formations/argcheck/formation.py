"""The argument check (`marina/argcheck:<model>`, or the header
`x-marina-argcheck: on|observe`).

Before a reply's state-changing tool calls go back to the client, their ids,
amounts, dates and options are looked up in the conversation
(argcheck/values.py). A call holding a value that neither the user stated nor a
tool returned gets one judgement (MARINA_ARGCHECK_TRIGGER=all-writes: every
write call does) and, if unsupported, one retry whose note names those values.
Arguments are never rewritten, and a call that was nudged once passes when it
is issued again (its signature is remembered in the conversation state)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from passthru.formations.argcheck.prompts import judge_messages, nudge_note, parse_judgement
from passthru.formations.argcheck.values import Value, channels_of, extract_values, grade, signature
from passthru.formations.conversation import calls_of, join_notes
from passthru.formations.tooleffect import WRITE, call_effect, effects
from passthru.formations.turn import Answer, Turn, reply_text
from passthru.providers import Route

MAX_CALLS = 4
MAX_SIGNATURES = 64
COUNTERS = ("checks", "flagged", "judged", "unsupported", "nudges", "unjudged")
# The request's label when no retry ran: the most consequential call's.
_RANK = ("unsupported", "judge-failed", "unjudged", "judged-supported", "supported", "repeat", "no-values")


def empty() -> dict[str, Any]:
    return {"nudged": [], **{k: 0 for k in COUNTERS}}


def replay(stored: Mapping[str, Any] | None, signatures: list[str], counts: Mapping[str, int]) -> dict[str, Any]:
    """The stored memo with this turn's nudged signatures and counter increments added."""
    memo = {**empty(), **dict(stored or {})}
    nudged = [s for s in memo["nudged"] if s not in signatures] + signatures
    memo["nudged"] = nudged[-MAX_SIGNATURES:]
    for key in COUNTERS:
        memo[key] = int(memo.get(key) or 0) + int(counts.get(key, 0))
    return memo


@dataclass
class ArgCheck:
    mode: str  # on | observe
    memo: dict[str, Any]
    judge: Route
    writes: int = 0
    checked: int = 0
    flagged: int = 0
    judged: int = 0
    check: str = ""
    new_signatures: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    cost_seqs: list[int] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)  # per checked call, for the span detail

    @classmethod
    def start(cls, mode: str, stored: Mapping[str, Any] | None, judge: Route) -> ArgCheck:
        return cls(mode, {**empty(), **dict(stored or {})}, judge)

    async def finish(self, turn: Turn, answer: Answer, notes: str) -> Answer:
        """Check the reply's write calls; `notes` (the obligations reminder) joins a retry's note."""
        if not answer.ok:
            self.check = "upstream-error"
            return answer
        if not turn.body.get("tools"):
            self.check = "no-tools"
            return answer
        message = answer.message
        if message is None:
            self.check = "unparsed"
            return answer
        declared = effects(turn.body.get("tools"))
        writes = [c for c in calls_of(message) if call_effect(c[1], declared) == WRITE][:MAX_CALLS]
        if not writes:
            self.check = "no-write"
            return answer
        self.writes = len(writes)
        channels = channels_of(turn.messages)  # the caller's messages: Marina's own notes are no evidence
        labels: list[str] = []
        nudges: list[str] = []
        nudged_signatures: list[str] = []
        for _, name, arguments in writes:
            sig = signature(name, arguments)
            if sig in self.memo["nudged"]:
                labels.append("repeat")
                self.calls.append({"call": name, "check": "repeat"})
                continue
            values = extract_values(arguments)
            flagged = [v for v in values if grade(v, channels) != "strong"]
            self.checked += len(values)
            self.flagged += len(flagged)
            self.counts["checks"] += 1
            self.counts["flagged"] += len(flagged)
            if settings.MARINA_ARGCHECK_TRIGGER == "flagged" and not flagged:
                labels.append("supported" if values else "no-values")
                self.calls.append({"call": name, "check": labels[-1], "values": len(values)})
                continue
            label, doubt = await self._judge(turn, name, arguments, values, channels)
            labels.append(label)
            self.calls.append({"call": name, "check": label, "values": len(values), "flagged": [v.path for v in flagged], "doubt": doubt})
            if label == "unsupported":
                nudges.append(nudge_note(name, flagged, channels, doubt))
                nudged_signatures.append(sig)
        if nudges and self.mode == "on":
            return await self._retry(turn, answer, writes, join_notes([notes, *nudges]), nudged_signatures)
        self.check = next((r for r in _RANK if r in labels), "no-values")
        return answer

    async def _judge(self, turn: Turn, name: str, arguments: Any, values: list[Value], channels: Any) -> tuple[str, str]:
        self.judged += 1
        self.counts["judged"] += 1
        paths = {v.path for v in values} | (set(arguments) if isinstance(arguments, Mapping) else set())
        messages = judge_messages(name, arguments, values, channels, turn.messages)
        done, error = await turn.side_call(self.judge, messages, "argcheck-judge")
        if done is None:
            self.counts["unjudged"] += 1
            turn.mark_failed("argcheck-judge", {"judge": "failed", "error": error})
            return "judge-failed", ""
        self.cost_seqs.append(done.span.seq)
        verdict = parse_judgement(reply_text(done), paths)
        if verdict is None:
            self.counts["unjudged"] += 1
            done.span.detail = {"call": name, "verdict": "unreadable"}
            return "unjudged", ""
        supported, doubt = verdict
        done.span.detail = {"call": name, "verdict": "supported" if supported else "unsupported", "doubt": doubt}
        if supported:
            return "judged-supported", ""
        self.counts["unsupported"] += 1
        return "unsupported", doubt

    async def _retry(self, turn: Turn, draft: Answer, writes: list[tuple[str, str, Any]], note: str, sigs: list[str]) -> Answer:
        self.new_signatures += sigs
        self.counts["nudges"] += 1
        retry, failed = await turn.retry(note)
        if retry is None:
            self.check = failed
            return draft
        self.cost_seqs.extend(draft.seqs)  # the discarded draft is the check's cost
        again = {signature(name, args) for _, name, args in calls_of(retry.message or {})}
        kept = all(signature(name, args) in again for _, name, args in writes)
        self.check = "nudged-kept" if kept else "nudged-changed"
        return retry

    def header(self) -> str:
        nudges = int(self.memo.get("nudges") or 0) + self.counts["nudges"]
        return (
            f"{self.mode};writes={self.writes};checked={self.checked};flagged={self.flagged};"
            f"judged={self.judged};nudges={nudges};check={self.check}"
        )

    def change(self, stored: Mapping[str, Any] | None) -> dict[str, Any]:
        return replay(stored, self.new_signatures, self.counts)


def judge_route(agent_id: str) -> str:
    return settings.MARINA_ARGCHECK_MODEL or settings.MARINA_OBLIGATIONS_MODEL or agent_id


__all__ = ["ArgCheck", "judge_route", "replay", "reply_text"]
