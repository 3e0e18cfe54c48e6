"""The obligations ledger (`marina/obligations:<model>`, or the header
`x-marina-obligations: on|observe`).

Before the main call: each new user turn is read into obligations (one
extraction call), successful write calls answered since the last turn settle
them (a transfer to a human hands them off), and in `on` mode the open ones
ride as a trailing note. After it: a final reply (no tool calls) that would
leave an obligation owed gets one judgement and, if owed, one retry that
quotes the draft. The model's text is never edited: the second reply is
returned as written. Every failure fails open (the draft goes back; the
header says why)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from passthru.formations.conversation import History, join_notes, read_history
from passthru.formations.obligations.ledger import DECLINED, SATISFIED, Ledger, replay, settle_call
from passthru.formations.obligations.prompts import (
    extraction_messages,
    judge_messages,
    nudge_note,
    parse_extraction,
    parse_judgement,
    reminder_note,
)
from passthru.formations.tooleffect import WRITE, effects
from passthru.formations.turn import Answer, Turn, reply_text
from passthru.providers import Route


@dataclass
class ObligationsCheck:
    mode: str  # on | observe
    ledger: Ledger
    judge: Route
    extract: str = ""  # ok | failed | '' (no new user turn)
    check: str = ""
    skipped: str = ""
    reminder: str = ""
    cost_seqs: list[int] = field(default_factory=list)  # the ledger's own calls and a discarded draft

    @classmethod
    def start(cls, mode: str, stored: Mapping[str, Any] | None, judge: Route) -> ObligationsCheck:
        return cls(mode, Ledger.of(stored), judge)

    # --- before the main call -------------------------------------------------------
    async def prepare(self, turn: Turn) -> str:
        """Extract, settle, and return the trailing note ('' in observe mode or with nothing open)."""
        if not turn.body.get("tools"):
            self.skipped = "no-tools"
            return ""
        history = read_history(turn.messages)
        declared = effects(turn.body.get("tools"))
        ledger = self.ledger
        if len(history.requests) < ledger.data["turns"] or len(history.calls) < ledger.data["calls"]:
            ledger.reset()  # an edited or replayed history: start again from what it says
        new = [r for r in history.requests if r.turn > ledger.data["turns"]]
        if new:
            await self._extract(turn, history, new, declared)
        for call in history.calls[ledger.data["calls"] :]:
            settled = settle_call(ledger.open_items(), call, declared)
            if settled is not None:
                for item_id in settled.item_ids:
                    ledger.settle(item_id, settled.status, settled.by)
        ledger.read(len(history.requests), len(history.calls))
        if self.mode == "on":
            self.reminder = reminder_note(ledger.open_items())
        return self.reminder

    async def _extract(self, turn: Turn, history: History, new: list[Any], declared: Mapping[str, str]) -> None:
        write_tools = []
        for tool in turn.body.get("tools") or ():
            fn = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
            name = fn.get("name")
            if isinstance(name, str) and declared.get(name) == WRITE:
                write_tools.append((name, str(fn.get("description") or "")))
        messages = extraction_messages(write_tools, self.ledger.open_items(), new)
        done, error = await turn.side_call(self.judge, messages, "extract")
        found = None
        if done is not None:
            self.cost_seqs.append(done.span.seq)
            found = parse_extraction(reply_text(done), {r.turn for r in new}, set(declared))
        if found is None:
            self.extract = "failed"
            self.ledger.count_failed_extraction()
            if done is not None:
                done.span.detail = {"extract": "unreadable"}
            else:
                turn.mark_failed("extract", {"extract": "failed", "error": error})
            return
        self.extract = "ok"
        for item_id in found["cancel"]:
            self.ledger.settle(item_id, DECLINED, "user")
        for item_id in found["consent"]:
            self.ledger.consent(item_id, max(r.turn for r in new))
        added = [self.ledger.add(item) for item in found["add"]]
        assert done is not None  # found came from it
        done.span.detail = {"extract": "ok", "added": [a for a in added if a], "cancelled": found["cancel"]}

    # --- after the main call ----------------------------------------------------------
    async def finish(self, turn: Turn, answer: Answer) -> Answer:
        if self.skipped:
            return answer
        if not answer.ok:
            self.check = "upstream-error"
            return answer
        if self.mode == "observe":
            self.check = "observe"
            return answer
        message = answer.message
        if message is None:
            self.check = "unparsed"
            return answer
        if message.get("tool_calls"):
            self.check = "tool-call"
            return answer
        pending = [i for i in self.ledger.open_items() if not i["nudged"]]
        if not pending:
            self.check = "none-open"
            return answer
        owed = await self._judge(turn, answer, pending)
        if owed is None:
            return answer
        if not owed:
            self.check = "handled"
            return answer
        self.ledger.nudge(i["id"] for i in owed)
        note = join_notes([reminder_note(self.ledger.open_items()), nudge_note(answer.text(), owed)])
        return await self._retry(turn, answer, note)

    async def _judge(self, turn: Turn, answer: Answer, pending: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """The owed obligations, or None when the judgement failed (check says why)."""
        history = read_history(turn.messages)
        actions = [f"{c.name}({'ok' if c.ok else 'failed'})" for c in history.calls]
        latest = history.requests[-1].text if history.requests else ""
        done, error = await turn.side_call(self.judge, judge_messages(pending, actions, latest, answer.text()), "judge")
        if done is None:
            self.check = "judge-failed"
            turn.mark_failed("judge", {"judge": "failed", "error": error})
            return None
        self.cost_seqs.append(done.span.seq)
        verdicts = parse_judgement(reply_text(done), {i["id"] for i in pending})
        done.span.detail = {"judge": "obligations", "verdicts": verdicts or "unreadable"}
        if verdicts is None:
            self.check = "unjudged"
            return None
        owed = []
        for item in pending:
            verdict = verdicts.get(item["id"], "owed")
            if verdict == "declined":
                self.ledger.settle(item["id"], DECLINED, "judge:declined")
            elif verdict == "done":
                self.ledger.settle(item["id"], SATISFIED, "judge:done")
            elif verdict == "owed":
                owed.append(item)
        return owed

    async def _retry(self, turn: Turn, draft: Answer, note: str) -> Answer:
        retry, failed = await turn.retry(note)
        if retry is None:
            self.check = failed
            return draft
        self.cost_seqs.extend(draft.seqs)  # the discarded draft is the ledger's cost
        self.check = "nudged-acted" if (retry.message or {}).get("tool_calls") else "nudged-kept"
        return retry

    # --- reporting and storing --------------------------------------------------------
    def header(self) -> str:
        if self.skipped:
            return f"{self.mode};skipped={self.skipped}"
        c = self.ledger.counts()
        parts = [self.mode, f"open={c['open']}", f"satisfied={c['satisfied']}", f"declined={c['declined']}", f"nudges={c['nudges']}"]
        if self.extract:
            parts.append(f"extract={self.extract}")
        if self.check:
            parts.append(f"check={self.check}")
        return ";".join(parts)

    def change(self, stored: Mapping[str, Any] | None) -> dict[str, Any]:
        return replay(stored, self.ledger.ops)


def judge_route(agent_id: str) -> str:
    return settings.MARINA_OBLIGATIONS_MODEL or agent_id
