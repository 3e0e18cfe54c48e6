"""One stacked request in progress (marina/obligations:, marina/argcheck:,
and what they wrap): the calls the checks make, each a child span of the
stack's span, and the main call they check (the agent model, or a whole
marina/verify: run)."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ledger.spend.records import SpanRecord
from passthru.calls import Completion, call_json
from passthru.context import RequestContext
from passthru.errors import ApiError
from passthru.formations.conversation import first_message, join_notes, text_of, with_trailing_note
from passthru.providers import Route

log = logging.getLogger(__name__)


@dataclass
class Answer:
    """A reply of the main call; `seqs` are the spans it took (a verify run takes several)."""

    completion: Completion
    label: str = ""  # x-marina-verify's label when verify produced it
    seqs: range = range(0)
    lessons: str = ""  # verify's x-marina-lessons when verify produced it

    @property
    def ok(self) -> bool:
        return self.completion.ok

    @property
    def message(self) -> dict[str, Any] | None:
        return first_message(self.completion.payload)

    def text(self) -> str:
        return text_of((self.message or {}).get("content"))

    def is_empty(self) -> bool:
        message = self.message
        return message is None or (not self.text().strip() and not message.get("tool_calls"))


@dataclass
class Turn:
    ctx: RequestContext
    body: dict[str, Any]
    span: SpanRecord
    agent: Route  # the agent model (verify's proposer when verify is wrapped)
    verify: bool = False
    decisions: dict[str, Any] = field(default_factory=dict)
    lessons_note: str = ""  # recalled lessons, riding first in every trailing note of this turn

    @property
    def messages(self) -> list[Any]:
        messages: list[Any] = self.body["messages"]
        return messages

    async def main(self, note: str, name: str) -> Answer:
        """The agent's reply to the caller's body with `note` trailing. Raises
        ApiError as the passthru would (the caller decides whether to fail open)."""
        note = join_notes([self.lessons_note, note])
        body = {**self.body, "messages": with_trailing_note(self.messages, note)} if note else self.body
        first = len(self.ctx.spans)
        if self.verify:
            from passthru.formations.verify.formation import VERIFY

            result = await VERIFY.produce(self.ctx, body, parent_seq=self.span.seq)
            answer = Answer(result.final, result.label, range(first, len(self.ctx.spans)), result.lessons)
        else:
            done = await call_json(self.ctx, self.agent, body, name=name, parent_seq=self.span.seq)
            answer = Answer(done, "", range(first, len(self.ctx.spans)))
        if self.verify:
            self.ctx.spans[first].detail["step"] = name
        return answer

    async def retry(self, note: str) -> tuple[Answer | None, str]:
        """The main call again after a check's nudge: (the reply, '') or (None,
        nudge-failed | nudge-unparsed). Never raises: the check fails open to its draft."""
        try:
            answer = await self.main(note, "retry")
        except ApiError:
            return None, "nudge-failed"
        if not answer.ok:
            return None, "nudge-failed"
        if answer.is_empty():
            return None, "nudge-unparsed"
        return answer, ""

    def mark_failed(self, name: str, detail: dict[str, Any]) -> None:
        """Note why a side call failed on its span (the last one, when side_call made one)."""
        if self.ctx.spans and self.ctx.spans[-1].name == name:
            self.ctx.spans[-1].detail = detail

    async def side_call(self, route: Route, messages: list[dict[str, str]], name: str) -> tuple[Completion | None, str]:
        """An extraction or judgement: (the reply, '') or (None, why it failed). Never raises."""
        try:
            done = await call_json(self.ctx, route, {"messages": messages, "stream": False}, name=name, parent_seq=self.span.seq)
        except ApiError as exc:
            log.warning("%s %s failed: %s", self.ctx.request_id, name, exc.message)
            return None, exc.trace_kind
        if not done.ok:
            return None, f"http_{done.status}"
        return done, ""

    def spans_cost(self, seqs: range | list[int]) -> int:
        return sum(self.ctx.spans[i].cost_nanousd or 0 for i in seqs if self.ctx.spans[i].provider)


def reply_text(done: Completion) -> str:
    return text_of((first_message(done.payload) or {}).get("content"))
