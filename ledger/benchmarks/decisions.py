"""What the formations decided on an item's calls, read from Marina's traces.

A trace's `route` names the formation(s) that served it and its
`formation_label` their labels: `approved` for `marina/verify:`, and for a
stack `obligations=handled;argcheck=no-write;verify=approved` (cut at 64
characters). The stack's span records, untruncated, the headers it sent
(passthru/formations/stack.py): `x-marina-obligations`
(`on;open=1;satisfied=2;declined=0;nudges=1;extract=ok;check=nudged-acted`,
or `on;skipped=no-tools`) and `x-marina-argcheck`
(`on;writes=1;checked=3;flagged=1;judged=1;nudges=1;check=nudged-kept`).

Per item this gives
- `decisions`: per formation, how many calls got each label
  (`{"verify": {"approved": 3}, "obligations": {"none-open": 4, "nudged-acted": 1}}`);
- `counters`: the obligations ledger as the item's last call left it (open,
  satisfied, declined) and the retries it asked for over the item's calls
  (nudges); the argument check's write calls, values checked, values
  flagged and judgements summed over the calls, and its retries (nudges).

For `compare`, `pattern` folds the labels that mean "nothing to judge"
(a tool call, nothing owed, no write call…), so items group by what the
formation actually did on them."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kernel import formations

# The formations' names (kernel/formations.py). Which spans hold a decision that
# `of_trace` reads is kernel.formations.holds_decision (the ledger's trace writer
# keeps those spans with MARINA_TRACE_STORE=otel).
VERIFY, OBLIGATIONS, ARGCHECK = formations.VERIFY.name, formations.OBLIGATIONS.name, formations.ARGCHECK.name
STACKED = (OBLIGATIONS, ARGCHECK)

# Labels meaning a retry ran (passthru/formations/obligations/formation.py and argcheck.py `_retry`).
NUDGED = frozenset({"nudged-acted", "nudged-kept", "nudged-changed", "nudge-failed", "nudge-unparsed"})
# Labels meaning the formation had nothing to judge on that call: folded in `pattern`.
ROUTINE = {
    OBLIGATIONS: frozenset({"tool-call", "none-open", "no-tools", "observe"}),
    ARGCHECK: frozenset({"no-tools", "no-write", "no-values", "supported", "repeat"}),
}
NOTHING_JUDGED = "nothing judged"
_LABEL_LIMIT = 64  # Trace.formation_label's length: a label this long may have been cut

# The header fields kept as counters: obligations' are the conversation's ledger
# after the call (the last call's stand for the item), argcheck's are this call's.
OBLIGATIONS_STATE = ("open", "satisfied", "declined")
ARGCHECK_COUNTS = ("writes", "checked", "flagged", "judged")


def read_header(value: str) -> dict[str, str]:
    """`on;open=1;check=handled` -> {"mode": "on", "open": "1", "check": "handled"}."""
    parts = value.split(";")
    fields = {"mode": parts[0]}
    for part in parts[1:]:
        key, _, val = part.partition("=")
        fields[key] = val
    return fields


def _int(value: str | None) -> int:
    return int(value) if value and value.isdigit() else 0


@dataclass
class CallDecision:
    """One trace's decisions: a label per formation, and the stacked formations' header fields."""

    labels: dict[str, str] = field(default_factory=dict)
    headers: dict[str, dict[str, str]] = field(default_factory=dict)


def of_trace(route: str, formation_label: str, spans: Iterable[tuple[str, Mapping[str, Any]]]) -> CallDecision:
    """The decisions on one trace, from its route and label and its spans' (name, detail)."""
    call = CallDecision()
    if not formation_label or route in ("", "passthru"):
        return call
    parts = formation_label.split(";")
    if all("=" in p for p in parts):  # a stack: formation=label;...
        complete = parts if len(formation_label) < _LABEL_LIMIT else parts[:-1]
        for part in complete:
            name, _, label = part.partition("=")
            call.labels[name] = label
    else:
        call.labels[route] = formation_label
    verify_label = ""
    for name, detail in spans:
        for formation in STACKED:
            header = detail.get(formation)
            if isinstance(header, str):
                fields = read_header(header)
                call.headers[formation] = fields
                call.labels[formation] = fields.get("check") or fields.get("skipped") or fields["mode"]
        if name == VERIFY and isinstance(detail.get("label"), str):
            verify_label = detail["label"]  # the last verify run's: the answer's, but after a failed retry
    if verify_label and "+" in route and VERIFY not in call.labels:  # cut off the end of a stack's label
        call.labels[VERIFY] = verify_label
    return call


@dataclass
class ItemDecisions:
    """Accumulates one item's calls (in time order)."""

    decisions: dict[str, dict[str, int]] = field(default_factory=dict)
    counters: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, call: CallDecision) -> None:
        for formation, label in call.labels.items():
            counts = self.decisions.setdefault(formation, {})
            counts[label] = counts.get(label, 0) + 1
            if formation in STACKED:
                totals = self.counters.setdefault(formation, {"nudges": 0})
                totals["nudges"] += label in NUDGED
        if OBLIGATIONS in call.headers:
            fields = call.headers[OBLIGATIONS]
            if "open" in fields:  # a skipped call reports no ledger
                self.counters[OBLIGATIONS].update({k: _int(fields.get(k)) for k in OBLIGATIONS_STATE})
        if ARGCHECK in call.headers:
            fields, totals = call.headers[ARGCHECK], self.counters[ARGCHECK]
            for key in ARGCHECK_COUNTS:
                totals[key] = totals.get(key, 0) + _int(fields.get(key))


def normalize(decisions: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Per formation; an item linked before stacks were read apart stored
    `{"obligations+argcheck": {"obligations=handled;argcheck=no-write": 2}}`."""
    out: dict[str, dict[str, int]] = {}
    for route, labels in decisions.items():
        for label, n in labels.items():
            parts = label.split(";")
            pairs = [p.partition("=")[::2] for p in parts] if all("=" in p for p in parts) else [(route, label)]
            for formation, one in pairs:
                counts = out.setdefault(formation, {})
                counts[one] = counts.get(one, 0) + n
    return out


def pattern(formation: str, labels: Iterable[str]) -> str:
    """`verify: approved+revised`, `obligations: nudged-acted`, or
    `argcheck: nothing judged` when every call was routine."""
    kept = sorted(set(labels) - ROUTINE.get(formation, frozenset()))
    return f"{formation}: " + ("+".join(kept) if kept else NOTHING_JUDGED)


def patterns(decisions: Mapping[str, Mapping[str, int]]) -> dict[str, str]:
    """formation -> pattern, for one item."""
    return {formation: pattern(formation, labels) for formation, labels in normalize(decisions).items()}


def summary(decisions: Mapping[str, Mapping[str, int]], counters: Mapping[str, Mapping[str, int]]) -> str:
    """`verify: 3 approved, 1 revised; obligations: 4 none-open (nudges 1, open 0)` for people."""
    out = []
    for formation, labels in sorted(normalize(decisions).items()):
        text = f"{formation}: " + ", ".join(f"{n} {label}" for label, n in sorted(labels.items(), key=lambda x: (-x[1], x[0])))
        counts = counters.get(formation)
        if counts:
            text += " (" + ", ".join(f"{k} {v}" for k, v in counts.items()) + ")"
        out.append(text)
    return "; ".join(out)
