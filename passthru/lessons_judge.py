"""The judge that learning (ledger/lessons/learning.py) asks about each failed
simulation, through Marina's own upstream path: passthru.calls.call_json, so
each judgement is priced, checked against the daily cap, counted in
spend_daily and traced (route `learn`, key `learn_lessons`) like any /v1 call.

Lives in passthru/ because it needs passthru's upstream path (and the ledger's
trace writer, below it). The ledger never imports passthru: the commands that
learn (learn_lessons, import_tau2 --learn: repro/management/commands/, above
both apps) hand this class to ledger.lessons.cli.run_learning."""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from ledger.lessons.learning import Judged, StopLearning
from ledger.spend import services
from passthru import spendcap
from passthru.calls import call_json
from passthru.context import Inbound, RequestContext
from passthru.errors import ApiError
from passthru.formations.turn import reply_text
from passthru.providers import Route, resolve

log = logging.getLogger(__name__)

KEY_NAME = "learn_lessons"  # what spend and traces are filed under
PATH = "/internal/learn_lessons"


class UpstreamJudge:
    """Callable: messages -> Judged. One event loop for all its calls (the
    upstream transport is per loop); close() when done."""

    def __init__(self, model_id: str) -> None:
        try:
            self.route: Route = resolve(model_id)
        except ApiError as exc:
            raise ValueError(f"--judge-model {model_id}: {exc.message}") from None
        self.model_id = model_id
        self.loop = asyncio.new_event_loop()

    def __call__(self, messages: list[dict[str, str]]) -> Judged:
        ctx = RequestContext.for_request(Inbound("POST", PATH, {}, b""))
        ctx.key_name, ctx.requested_model, ctx.route = KEY_NAME, self.model_id, "learn"
        body: dict[str, Any] = {"model": self.model_id, "messages": messages, "stream": False}
        try:
            done = self.loop.run_until_complete(call_json(ctx, self.route, body, name="learn"))
        except ApiError as exc:
            kind = exc.trace_kind
            self._record(ctx, exc.status, kind, exc.message)
            if exc.code == "spend_cap_reached":
                raise StopLearning(exc.message) from None  # no later call would pass either
            return Judged(None, None, kind)
        if not done.ok:
            self._record(ctx, done.status, f"http_{done.status}")
            return Judged(None, None, f"http_{done.status}")
        self._record(ctx, done.status)
        return Judged(reply_text(done), done.usage.cost_nanousd)

    @staticmethod
    def _record(ctx: RequestContext, http_status: int, error_kind: str = "", message: str = "") -> None:
        # The conversation is never stored, MARINA_TRACE_BODIES or not: it came
        # from a results file, and only the lessons that pass the leak guard stay.
        for span in ctx.spans:
            span.body = None
        status = "ok" if http_status < 400 else "error"
        record = ctx.trace(http_status=http_status, status=status, error_kind=error_kind, error_message=message[:500])
        services.record_request(record)
        # Recorded: the daily cap's lease now counts the judgement at what it spent
        # (unreleased, an unpriced judge would never use up the lease: no stop).
        spendcap.release(ctx.holds, record.upstream_cost_nanousd)

    def close(self) -> None:
        self.loop.close()
