"""Linking a run's items to the traces Marina recorded for them.

τ² sends no per-simulation header. Every request of one simulation carries the
trial's `seed` and repeats the conversation's opening; Marina records both on
each trace as a seed and two hashes, never the text (kernel/conversation.py).
The results file holds each simulation's seed and its first two messages, from
which the reader computes the hashes the agent's requests carry and the ones
the user simulator's carry (roles swapped). So, within the run's time window
and among the run's agent and user model ids:

1. a trace whose (seed, opening) equals one item's agent hash is that item's
   agent call; equal to its user hash, a user-simulator call;
2. the user simulator's first call has only the greeting, the same for every
   task: it is linked through its system prompt's hash, when that (seed,
   system) pair belongs to exactly one item's already linked user calls;
3. a trace must also fall within its item's own start..end (with a little
   slack); when two items still qualify the trace is left unlinked and the
   items are reported as ambiguous, never guessed.

Only the traces of the keys the run used are considered when the import names
them (`import_tau2 --key NAME`, the kit's experiment key; an operator key's
callers `NAME/…` with it): one team's import never claims another's calls.
Without keys every key's traces are candidates, and the import says which keys
its links came from (and warns when they came from several).

Items with an identity but no linked trace are `unfound`, and the import says
how many. Nothing here writes: `plan_links` returns what the import writes in
its own transaction."""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q

from ledger.benchmarks.decisions import ARGCHECK, OBLIGATIONS, VERIFY, ItemDecisions, of_trace
from ledger.benchmarks.items import LedgerItem
from ledger.benchmarks.tau2.results import parse_time
from ledger.models import Span, Trace
from ledger.spend.selectors import owned_by

# Marina stamps a trace when the request arrives, τ² stamps a simulation just
# before its first call and just after its last: the same clock, so a little
# slack covers rounding only.
SLACK = timedelta(seconds=2)

LINKED, UNFOUND, AMBIGUOUS = "linked", "unfound", "ambiguous"


@dataclass
class ItemLinks:
    status: str = ""  # linked | unfound | ambiguous | "" (no identity to link by)
    traces: list[tuple[int, str]] = field(default_factory=list)  # (trace id, role)
    calls: int = 0
    errors: int = 0
    unpriced: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_nanousd: int | None = None
    decided: ItemDecisions = field(default_factory=ItemDecisions)

    @property
    def decisions(self) -> dict[str, dict[str, int]]:
        return self.decided.decisions

    @property
    def counters(self) -> dict[str, dict[str, int]]:
        return self.decided.counters


@dataclass
class LinkPlan:
    items: dict[str, ItemLinks]  # by item id
    candidates: int = 0  # traces in the window with a seed, of the run's model ids
    unassigned: int = 0  # of those, linked to no item
    within: tuple[str, ...] | None = None  # the keys the import named, or None: every key's traces
    keys: list[str] = field(default_factory=list)  # the key names of the linked traces

    def _keys_note(self) -> str:
        named = ", ".join(self.keys) or "none"
        if self.within is not None:
            return f"within key(s) {', '.join(self.within)}: links from {named}"
        if len(self.keys) > 1:
            return f"links from {len(self.keys)} keys ({named}): pass --key to link within the run's own"
        return f"links from key(s) {named} (no --key: every key's traces were candidates)"

    def count(self, status: str) -> int:
        return sum(1 for links in self.items.values() if links.status == status)

    @property
    def attempted(self) -> bool:
        return any(links.status for links in self.items.values())

    def note(self) -> str:
        """One line for the import's output."""
        if not self.attempted:
            return "items not linked to traces: the file records no seed or opening to link by"
        parts = [f"{self.count(LINKED)} item(s) linked to {sum(len(x.traces) for x in self.items.values())} trace(s)"]
        if self.count(UNFOUND):
            parts.append(f"{self.count(UNFOUND)} item(s) with no trace found")
        if self.count(AMBIGUOUS):
            parts.append(f"{self.count(AMBIGUOUS)} item(s) ambiguous (left unlinked)")
        if self.unassigned:
            parts.append(f"{self.unassigned} trace(s) of these models in the window belong to no item")
        parts.append(self._keys_note())
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "linked": self.count(LINKED),
            "unfound": self.count(UNFOUND),
            "ambiguous": self.count(AMBIGUOUS),
            "traces": sum(len(x.traces) for x in self.items.values()),
            "unassigned_traces": self.unassigned,
            "within_keys": list(self.within) if self.within is not None else None,
            "keys": self.keys,
        }


@dataclass
class _Window:
    item_id: str
    start: datetime | None
    end: datetime | None

    def holds(self, moment: datetime) -> bool:
        if self.start is None or self.end is None:
            return True
        return self.start - SLACK <= moment <= self.end + SLACK


_FIELDS = (
    "id", "started_at", "conv_seed", "conv_opening", "conv_system", "status", "prompt_tokens",
    "completion_tokens", "cost_nanousd", "route", "formation_label", "key_name",
)  # fmt: skip


def of_keys(keys: Sequence[str]) -> Q:
    """Rows of these keys, and of their callers when one is an operator key
    (`NAME/agent`, passthru/auth.py: no key name holds a `/`)."""
    found = Q(pk__in=[])
    for key in keys:
        found |= owned_by(key)
    return found


def _candidates(
    models: Sequence[str], seeds: Sequence[int | None], started: datetime, ended: datetime, keys: Sequence[str] | None
) -> list[dict[str, Any]]:
    """The traces that may be the run's: in its window, of its model ids and seeds, of its keys when named."""
    found = Trace.objects.filter(
        started_at__gte=started - SLACK, started_at__lte=ended + SLACK, requested_model__in=models, conv_seed__in=seeds,
    )  # fmt: skip
    if keys is not None:
        found = found.filter(of_keys(keys))
    return list(found.order_by("started_at", "pk").values(*_FIELDS))


def plan_links(
    items: Sequence[LedgerItem], *, models: Sequence[str], started: datetime | None, ended: datetime | None,
    keys: Sequence[str] | None = None,
) -> LinkPlan:
    """Which traces belong to which item (nothing written); only `keys`' traces when given."""
    plan = LinkPlan(items={i.id: ItemLinks() for i in items}, within=tuple(keys) if keys is not None else None)
    identified = [i for i in items if i.seed is not None and (i.opening_agent or i.opening_user)]
    for item in identified:
        plan.items[item.id].status = UNFOUND
    models = [m for m in models if m]
    if not identified or not models or started is None or ended is None:
        return plan

    seeds = sorted({i.seed for i in identified})  # type: ignore[type-var]
    rows = _candidates(models, seeds, started, ended, keys)
    plan.candidates = len(rows)
    linked, ambiguous = _match(rows, identified)

    spans = _decision_spans([row["id"] for row in rows if row["id"] in linked and row["route"] not in ("", "passthru")])
    for row in rows:  # in time order: the last call's obligations ledger stands for the item
        if row["id"] in linked:
            item_id, role = linked[row["id"]]
            _add(plan.items[item_id], row, role, spans.get(row["id"], []))
    for item_id in ambiguous:
        if not plan.items[item_id].traces:
            plan.items[item_id].status = AMBIGUOUS
    plan.unassigned = len(rows) - len(linked)
    plan.keys = sorted({row["key_name"] for row in rows if row["id"] in linked})
    return plan


def _match(rows: list[dict[str, Any]], identified: list[LedgerItem]) -> tuple[dict[int, tuple[str, str]], set[str]]:
    """trace id -> (item id, role) for each call that fits exactly one item's
    window, and the items a call fit several of (left unlinked): 1. by (seed,
    opening); 2. the user simulator's first call, through the system prompt its
    linked calls share."""
    windows = {i.id: _Window(i.id, parse_time(i.start_time), parse_time(i.end_time)) for i in identified}
    by_opening: dict[tuple[int, str], list[tuple[str, str]]] = defaultdict(list)
    for item in identified:
        for role, opening in (("agent", item.opening_agent), ("user", item.opening_user)):
            if opening:
                by_opening[(item.seed, opening)].append((item.id, role))  # type: ignore[index]
    ambiguous: set[str] = set()
    linked: dict[int, tuple[str, str]] = {}  # trace id -> (item id, role)

    def assign(row: dict[str, Any], owners: list[tuple[str, str]]) -> None:
        fits = [(item_id, role) for item_id, role in owners if windows[item_id].holds(row["started_at"])]
        if len(fits) == 1:
            linked[row["id"]] = fits[0]
        elif len(fits) > 1:
            ambiguous.update(item_id for item_id, _ in fits)

    for row in rows:  # 1. by (seed, opening)
        owners = by_opening.get((row["conv_seed"], row["conv_opening"]))
        if owners:
            assign(row, owners)

    # 2. the user simulator's first call, through the system prompt its linked calls share
    user_systems: dict[tuple[int, str], set[str]] = defaultdict(set)
    for row in rows:
        if row["id"] in linked and linked[row["id"]][1] == "user" and row["conv_system"]:
            user_systems[(row["conv_seed"], row["conv_system"])].add(linked[row["id"]][0])
    for row in rows:
        if row["id"] in linked:
            continue
        owners_ = user_systems.get((row["conv_seed"], row["conv_system"]))
        if owners_:
            assign(row, [(item_id, "user") for item_id in sorted(owners_)])
    return linked, ambiguous


def _decision_spans(trace_ids: list[int]) -> dict[int, list[tuple[str, dict[str, Any]]]]:
    """trace id -> (name, detail) of its spans that record formation decisions, in order."""
    out: dict[int, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    holds = Q(name=VERIFY) | Q(detail__has_key=OBLIGATIONS) | Q(detail__has_key=ARGCHECK)
    for start in range(0, len(trace_ids), 500):  # SQLite limits the parameters of one query
        chunk = trace_ids[start : start + 500]
        for trace_id, name, detail in (
            Span.objects.filter(holds, trace_id__in=chunk).order_by("trace_id", "seq").values_list("trace_id", "name", "detail")
        ):
            out[trace_id].append((name, detail if isinstance(detail, dict) else {}))
    return out


def _add(links: ItemLinks, row: dict[str, Any], role: str, spans: list[tuple[str, dict[str, Any]]]) -> None:
    links.status = LINKED
    links.traces.append((row["id"], role))
    links.calls += 1
    links.errors += row["status"] != "ok"
    links.prompt_tokens += row["prompt_tokens"]
    links.completion_tokens += row["completion_tokens"]
    if row["cost_nanousd"] is None:
        links.unpriced += row["status"] != "error"  # a failed call is an error, not an unpriced one
    else:
        links.cost_nanousd = (links.cost_nanousd or 0) + row["cost_nanousd"]
    links.decided.add(of_trace(row["route"], row["formation_label"], spans))
