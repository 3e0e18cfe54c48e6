"""Why did B fail where A passed: one task's simulation on each side, turn by
turn, from the traces linked to the two items (ledger/benchmarks/links.py).

A turn is one agent request (τ² calls its agent model once per turn); the
user simulator's requests since the previous turn are counted into its cost.
Per turn:
- its **messages** when Marina stored bodies (`MARINA_TRACE_BODIES=on`): the
  messages the request added since the previous turn (the user's words, tool
  results) and the reply, redacted again on the way out;
- else its **skeleton**: the calls made (span names, models, statuses) and
  the tool names and argument names the argument check recorded;
- the formations' **interventions** where they happened: verify's review
  (verdict and fix) and revision (revised or a held write, with the guard's
  reason), retries after a nudge (with the note's text when stored), the
  obligations judge's verdicts, argcheck's judgements;
- its **cost**: the agent request's and the user simulator's, None (unpriced)
  when any of them has no price, never 0.

Each side also carries τ²'s reward breakdown from the results file, as the
importer kept it (BenchmarkItem.reward_breakdown: DB check, communicated
info, actions). The report page, `/api/trajectories` and `manage.py
trajectories` all go through `side_by_side` and `as_json`."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kernel import money
from kernel.redact import redact
from ledger.models import BenchmarkItem, BenchmarkItemTrace, BenchmarkRun, Span, Trace

TEXT_LIMIT = 4000  # characters of one message shown
NOTE_LIMIT = 1500
MAX_TURNS = 400  # a τ² simulation stops at 200 steps; a page shows at most this many turns a side
SIDE_CALLS = frozenset({"review", "extract", "judge", "argcheck-judge", "lessons"})


class TrajectoryError(ValueError):
    """Nothing to show: no such run, group or task, or no item on one side."""


@dataclass
class Intervention:
    kind: str  # review | revised | held-write | nudge | obligations-judge | argcheck
    text: str


@dataclass
class Message:
    role: str
    text: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # name, arguments (text)


@dataclass
class Call:
    name: str
    model: str
    status: str


@dataclass
class Turn:
    n: int
    trace_pk: int
    request_id: str
    started_at: datetime
    status: str
    formation_label: str
    agent_cost_nanousd: int | None
    user_cost_nanousd: int | None  # the user simulator's requests since the previous turn; None: one was unpriced
    user_calls: int
    messages: list[Message] | None  # None: no body stored
    calls: list[Call]
    tools: list[dict[str, Any]]  # name, arguments (names), check: from argcheck's record
    interventions: list[Intervention]

    @property
    def cost_nanousd(self) -> int | None:
        if self.agent_cost_nanousd is None or self.user_cost_nanousd is None:
            return None
        return self.agent_cost_nanousd + self.user_cost_nanousd


@dataclass
class Side:
    letter: str
    run: BenchmarkRun
    item: BenchmarkItem
    turns: list[Turn]
    more_turns: int  # past MAX_TURNS, not shown

    @property
    def outcome(self) -> str:
        return "infrastructure error" if self.item.infra_error else ("passed" if self.item.correct else "failed")

    @property
    def breakdown(self) -> list[dict[str, Any]]:
        return reward_rows(self.item.reward_breakdown or {})

    @property
    def cost_nanousd(self) -> int | None:
        """The item's cost from Marina's traces; None (unknown) when it was not
        linked or a call was unpriced."""
        if self.item.link_status != "linked" or self.item.trace_unpriced:
            return None
        return self.item.trace_cost_nanousd


@dataclass
class SideBySide:
    task_id: str
    a: Side
    b: Side
    disagree: bool


def reward_rows(breakdown: dict[str, Any]) -> list[dict[str, Any]]:
    """τ²'s reward breakdown as rows: DB check, communicated info, actions, and
    any other component τ² scored (NL assertions, environment assertions). Every row
    has `missed` (the expected actions' tool names not met; empty but for actions)."""
    rows: list[dict[str, Any]] = []
    components = breakdown.get("components")
    components = components if isinstance(components, dict) else {}
    basis = breakdown.get("basis")
    basis = basis if isinstance(basis, list) else list(components)
    db = breakdown.get("db")
    if isinstance(db, dict):
        rows.append({"check": "DB check", "result": "match" if db.get("match") else "no match", "missed": [],
                     "reward": db.get("reward"), "counts": "DB" in basis})  # fmt: skip
    for key, name in (("communicate", "communicated info"), ("actions", "actions")):
        part = breakdown.get(key)
        if isinstance(part, dict) and "total" in part:
            missed = part.get("missed")
            rows.append({"check": name, "result": f"{part.get('met', 0)} of {part['total']} met",
                         "missed": [m for m in missed if isinstance(m, str)] if isinstance(missed, list) else [],
                         "reward": components.get(key.upper()), "counts": key.upper() in basis})  # fmt: skip
    shown = {"DB", "COMMUNICATE", "ACTION", "ACTIONS"}
    for key, value in components.items():
        if key not in shown:
            rows.append({"check": key.lower().replace("_", " "), "result": "", "missed": [], "reward": value,
                         "counts": key in basis})  # fmt: skip
    return rows


def pick_items(
    a_runs: list[BenchmarkRun], b_runs: list[BenchmarkRun], task_id: str, trial: int | None = None
) -> tuple[BenchmarkItem, BenchmarkItem]:
    """The pair of items to show for a task: A passed and B failed if any pair
    does, else B passed and A failed, else the first pair; the same trial on
    both sides when both have it."""
    def items(runs: list[BenchmarkRun]) -> list[BenchmarkItem]:
        order = {r.pk: i for i, r in enumerate(runs)}
        found = BenchmarkItem.objects.filter(run__in=runs, task_id=task_id)
        if trial is not None:
            found = found.filter(trial=trial)
        return sorted(found, key=lambda i: (order[i.run_id], i.trial))

    side_a, side_b = items(a_runs), items(b_runs)
    if not side_a or not side_b:
        missing = "A" if not side_a else "B"
        raise TrajectoryError(f"Side {missing} has no simulation of task {task_id!r}" + (f", trial {trial}" if trial is not None else "") + ".")
    pairs = [(x, y) for x in side_a for y in side_b if not x.infra_error and not y.infra_error]
    same = [(x, y) for x, y in pairs if x.trial == y.trial]  # paired items first, as compare pairs them
    for candidates in (same, pairs):
        for wanted in ((True, False), (False, True)):
            for x, y in candidates:
                if (x.correct, y.correct) == wanted:
                    return x, y
    return (same or pairs or [(side_a[0], side_b[0])])[0]


def side_by_side(
    *, a: int | None = None, b: int | None = None, group_a: str = "", group_b: str = "",
    task: str, trial: int | None = None,
) -> SideBySide:  # fmt: skip
    """Runs `a` and `b` (or groups): the chosen pair of items of `task` and their turns."""
    a_runs, b_runs = _runs(a, group_a, "A"), _runs(b, group_b, "B")
    item_a, item_b = pick_items(a_runs, b_runs, task, trial)
    runs = {r.pk: r for r in [*a_runs, *b_runs]}
    side_a = _side("A", runs[item_a.run_id], item_a)
    side_b = _side("B", runs[item_b.run_id], item_b)
    disagree = not item_a.infra_error and not item_b.infra_error and item_a.correct != item_b.correct
    return SideBySide(task_id=task, a=side_a, b=side_b, disagree=disagree)


def _runs(run_id: int | None, group: str, letter: str) -> list[BenchmarkRun]:
    if run_id is not None:
        run = BenchmarkRun.objects.filter(pk=run_id).first()
        if run is None:
            raise TrajectoryError(f"No run #{run_id}.")
        return [run]
    if not group:
        raise TrajectoryError(f"Side {letter}: give a run or a group.")
    runs = list(BenchmarkRun.objects.filter(group=group).exclude(status="invalid").order_by("created_at", "pk"))
    if not runs:
        raise TrajectoryError(f"No valid runs in group {group!r}.")
    return runs


def _side(letter: str, run: BenchmarkRun, item: BenchmarkItem) -> Side:
    links = list(
        BenchmarkItemTrace.objects.filter(item=item).select_related("trace").order_by("trace__started_at", "trace_id")
    )
    agent = [link.trace for link in links if link.role == "agent"]
    shown, more = agent[:MAX_TURNS], max(0, len(agent) - MAX_TURNS)
    spans: dict[int, list[Span]] = {}
    # The traces' days name their spans' partitions (PostgreSQL): only those are read.
    days = {t.started_at for t in shown}
    for span in Span.objects.filter(trace__in=shown, trace_started_at__in=days).order_by("trace_id", "seq"):
        spans.setdefault(span.trace_id, []).append(span)
    users = [link.trace for link in links if link.role == "user"]
    turns: list[Turn] = []
    seen = 0  # messages in the previous agent request
    for n, trace in enumerate(shown, start=1):
        before = [u for u in users if u.started_at <= trace.started_at]
        users = users[len(before):]
        user_cost: int | None = 0
        for u in before:
            user_cost = None if u.cost_nanousd is None or user_cost is None else user_cost + u.cost_nanousd
        messages, seen = _messages(trace, spans.get(trace.pk, []), seen)
        own = spans.get(trace.pk, [])
        turns.append(Turn(
            n=n, trace_pk=trace.pk, request_id=trace.request_id, started_at=trace.started_at, status=trace.status,
            formation_label=trace.formation_label, agent_cost_nanousd=trace.cost_nanousd, user_cost_nanousd=user_cost,
            user_calls=len(before), messages=messages,
            calls=[Call(s.name, s.upstream_model, s.status) for s in own if s.provider or s.name in SIDE_CALLS],
            tools=_tools(own), interventions=_interventions(own),
        ))  # fmt: skip
    return Side(letter=letter, run=run, item=item, turns=turns, more_turns=more)


def _text(content: Any) -> str:
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    else:
        text = "" if content is None else json.dumps(content)
    return text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT] + " …"


def _message(raw: Any) -> Message | None:
    if not isinstance(raw, dict):
        return None
    calls = []
    for call in raw.get("tool_calls") or []:
        fn = (call.get("function") or {}) if isinstance(call, dict) else {}
        calls.append({"name": str(fn.get("name", "")), "arguments": _text(fn.get("arguments", ""))})
    return Message(role=str(raw.get("role", "")), text=_text(raw.get("content")), tool_calls=calls)


def _messages(trace: Trace, spans: list[Span], seen: int) -> tuple[list[Message] | None, int]:
    """The messages this turn added and its reply, when bodies were stored; and
    how many messages this request held."""
    body = redact(trace.body) if trace.body is not None else None
    sent = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(sent, list):
        return None, seen
    new = sent[seen:] if len(sent) >= seen else sent
    out = [m for m in (_message(raw) for raw in new) if m is not None]
    reply = _reply(spans)
    if reply is not None:
        out.append(reply)
    # The reply comes back in the next request: count it as seen.
    return out, len(sent) + (1 if reply is not None else 0)


def _reply(spans: list[Span]) -> Message | None:
    """The reply the caller got: the last answering call's stored response
    (a held or rejected revision is not what the caller got: verify's draft is)."""
    held = any(s.name == "revision" and (s.detail or {}).get("guard") not in (None, "accepted") for s in spans)
    for span in reversed(spans):
        if span.name in SIDE_CALLS or not span.provider or (held and span.name == "revision"):
            continue
        body = redact(span.body) if span.body is not None else None
        response = body.get("response") if isinstance(body, dict) else None
        choices = response.get("choices") if isinstance(response, dict) else None
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            return _message(choices[0].get("message"))
        return None
    return None


def _tools(spans: list[Span]) -> list[dict[str, Any]]:
    """Tool names and argument names the argument check recorded (no values)."""
    out = []
    for span in spans:
        for call in (span.detail or {}).get("argcheck_calls") or []:
            if isinstance(call, dict):
                out.append({"name": str(call.get("call", "")), "check": str(call.get("check", "")),
                            "arguments": [str(p) for p in call.get("flagged") or []]})  # fmt: skip
    return out


def _note(span: Span) -> str:
    body = span.body if isinstance(span.body, dict) else {}
    request = redact(body.get("request")) if body else None
    messages = request.get("messages") if isinstance(request, dict) else None
    if not isinstance(messages, list) or not messages:
        return "(the note's text was not stored: MARINA_TRACE_BODIES is off)"
    text = _text(messages[-1].get("content") if isinstance(messages[-1], dict) else "")
    return text[-NOTE_LIMIT:]


def _interventions(spans: list[Span]) -> list[Intervention]:
    out: list[Intervention] = []
    for span in spans:
        d = span.detail or {}
        if span.name == "review" and d.get("verdict"):
            text = f"verdict: {d['verdict']}" + (f"; fix: {d['fix']}" if d.get("fix") else "")
            if isinstance(d.get("conflict"), dict):
                text += f"; conflict: {json.dumps(d['conflict'])[:300]}"
            out.append(Intervention("review", text))
        elif span.name == "revision" and d.get("guard"):
            kind = "revised" if d["guard"] == "accepted" else "held-write"
            reason = d.get("guard_reason") or ""
            out.append(Intervention(kind, f"guard: {d['guard']}" + (f" ({reason})" if reason else "")
                                    + ("; the write calls changed" if d.get("writes_changed") else "")))  # fmt: skip
        elif span.name == "retry":
            out.append(Intervention("nudge", _note(span)))
        elif span.name == "judge" and d.get("judge") == "obligations":
            out.append(Intervention("obligations-judge", f"verdicts: {json.dumps(d.get('verdicts'))[:500]}"))
        elif span.name == "argcheck-judge" and d.get("verdict"):
            out.append(Intervention("argcheck", f"{d.get('call', '')}: {d['verdict']}" + (f" ({d['doubt']})" if d.get("doubt") else "")))
        for header in ("obligations", "argcheck"):  # a nudge whose retry left no span of its own
            if isinstance(d.get(header), str) and "check=nudge" in d[header] and not any(x.name == "retry" for x in spans):
                out.append(Intervention("nudge", f"{header}: {d[header]}"))
    return out


def as_json(view: SideBySide) -> dict[str, Any]:
    """What `/api/trajectories` returns and `manage.py trajectories --json` prints."""

    def usd(value: int | None) -> str | None:
        return None if value is None else money.plain(value)

    def side(s: Side) -> dict[str, Any]:
        return {
            "run_id": s.run.pk,
            "target": s.run.target,
            "group": s.run.group,
            "item": s.item.item_id,
            "trial": s.item.trial,
            "outcome": s.outcome,
            "reward": s.item.reward,
            "link_status": s.item.link_status,
            "cost_usd": usd(s.cost_nanousd),
            "reward_breakdown": s.breakdown,
            "turns": [
                {
                    "n": t.n,
                    "request_id": t.request_id,
                    "status": t.status,
                    "formation_label": t.formation_label,
                    "cost_usd": usd(t.cost_nanousd),
                    "agent_cost_usd": usd(t.agent_cost_nanousd),
                    "user_cost_usd": usd(t.user_cost_nanousd),
                    "user_calls": t.user_calls,
                    "messages": None if t.messages is None else [
                        {"role": m.role, "text": m.text, "tool_calls": m.tool_calls} for m in t.messages
                    ],
                    "calls": [{"name": c.name, "model": c.model, "status": c.status} for c in t.calls],
                    "tools": t.tools,
                    "interventions": [{"kind": i.kind, "text": i.text} for i in t.interventions],
                }
                for t in s.turns
            ],
            "more_turns": s.more_turns,
        }

    return {"task_id": view.task_id, "disagree": view.disagree, "a": side(view.a), "b": side(view.b)}
