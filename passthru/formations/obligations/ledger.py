"""The obligations ledger as data: what the user asked for, and what settled
it. Pure functions and one small class; no model calls, no database.

A turn works on a copy of the stored ledger through `Ledger`, whose every
change is also logged as an operation. At commit the log is replayed on the
ledger *as stored then* (`replay`), so a turn that raced another turn of the
same conversation adds its changes to the other's instead of overwriting
them. Replaying follows the same rules as the turn did: an extraction for a
user turn that the stored ledger has already read is not added twice."""
from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from passthru.formations.conversation import Call
from passthru.formations.tooleffect import WRITE, Effect, call_effect, name_words

MAX_ITEMS = 24
WHAT_CHARS = 160

OPEN = "open"
SATISFIED = "satisfied"
DECLINED = "declined"

_TRANSFER_WORDS = frozenset({"transfer", "escalate", "escalation", "handoff", "handover"})
_ID_TOKEN = re.compile(r"[#\w.:@/-]+")
_WORD = re.compile(r"[a-z]{4,}")
_STOP = frozenset({"that", "this", "with", "from", "have", "will", "their", "there", "would", "please", "order",
                   "user", "customer", "about", "into", "should", "which", "them", "they", "want", "make"})  # fmt: skip


def fold(text: Any, limit: int = WHAT_CHARS) -> str:
    """Whitespace folded, at most `limit` characters."""
    folded = " ".join(str(text or "").split())
    return folded[:limit]


def empty() -> dict[str, Any]:
    return {"turns": 0, "calls": 0, "next": 1, "items": [], "nudges": 0, "extract_failed": 0}


def is_transfer(name: str) -> bool:
    words = name_words(name)
    return any(w in _TRANSFER_WORDS for w in words) or "hand_off" in name.lower()


def id_tokens(value: Any) -> set[str]:
    """Id-like tokens: ≥ 3 characters holding a digit (not a 1–2 digit number), integers ≥ 100."""
    found: set[str] = set()
    _collect(value, found)
    return found


def _collect(value: Any, found: set[str]) -> None:
    if isinstance(value, Mapping):
        for v in value.values():
            _collect(v, found)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _collect(v, found)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int):
        if abs(value) >= 100:
            found.add(str(value))
    elif isinstance(value, float):
        if value.is_integer() and abs(value) >= 100:
            found.add(str(int(value)))
    else:
        for token in _ID_TOKEN.findall(str(value)):
            token = token.strip(".:,/-").lower()
            if len(token) >= 3 and any(c.isdigit() for c in token):
                found.add(token.lstrip("#"))


def words(value: Any) -> set[str]:
    text = " ".join(str(v) for v in _strings(value)).lower()
    return {w.rstrip("s") for w in _WORD.findall(text) if w not in _STOP}


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)
    elif value is not None:
        yield str(value)


@dataclass
class Ledger:
    """The ledger of one conversation during one turn; `ops` logs every change."""

    data: dict[str, Any]
    ops: list[list[Any]] = field(default_factory=list)
    log: bool = True

    @classmethod
    def of(cls, stored: Mapping[str, Any] | None) -> Ledger:
        data = copy.deepcopy(dict(stored)) if stored else empty()
        for key, value in empty().items():
            data.setdefault(key, value)
        return cls(data)

    # --- reading --------------------------------------------------------------
    @property
    def items(self) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.data["items"]
        return items

    def open_items(self) -> list[dict[str, Any]]:
        return [i for i in self.items if i["status"] == OPEN]

    def find(self, item_id: str) -> dict[str, Any] | None:
        return next((i for i in self.items if i["id"] == item_id), None)

    def counts(self) -> dict[str, int]:
        return {
            "open": sum(1 for i in self.items if i["status"] == OPEN),
            "satisfied": sum(1 for i in self.items if i["status"] == SATISFIED),
            "declined": sum(1 for i in self.items if i["status"] == DECLINED),
            "nudges": int(self.data["nudges"]),
        }

    # --- changing (each change is logged) -------------------------------------
    def _op(self, *op: Any) -> None:
        if self.log:
            self.ops.append(list(op))

    def reset(self) -> None:
        self.data = empty()
        self._op("reset")

    def add(self, item: Mapping[str, Any]) -> str | None:
        """Add an open obligation from user turn `item['turn']`, unless that turn
        was already read or an open one says the same. Returns its id."""
        turn = int(item.get("turn") or 0)
        what = fold(item.get("what"))
        if not what or turn <= self.data["turns"]:
            return None
        target = fold(item.get("target"))
        same = (what.lower(), target.lower())
        if any((i["what"].lower(), i["target"].lower()) == same for i in self.open_items()):
            return None
        new = {
            "id": f"o{self.data['next']}",
            "what": what,
            "target": target,
            "constraints": fold(item.get("constraints")),
            "tools": [str(t) for t in (item.get("tools") or [])][:4],
            "turn": turn,
            "status": OPEN,
            "by": "",
            "nudged": False,
            "consent_turn": None,
        }
        self.data["next"] += 1
        self.items.append(new)
        self._bound()
        self._op("add", new["id"], {k: new[k] for k in ("what", "target", "constraints", "tools", "turn")})
        return str(new["id"])

    def read(self, turns: int, calls: int) -> None:
        self.data["turns"] = max(self.data["turns"], turns)
        self.data["calls"] = max(self.data["calls"], calls)
        self._op("read", turns, calls)

    def settle(self, item_id: str, status: str, by: str) -> bool:
        item = self.find(item_id)
        if item is None or item["status"] != OPEN:
            return False
        item["status"], item["by"] = status, by
        self._op("settle", item_id, status, by)
        return True

    def consent(self, item_id: str, turn: int) -> None:
        item = self.find(item_id)
        if item is not None and item["status"] == OPEN:
            item["consent_turn"] = turn
            self._op("consent", item_id, turn)

    def nudge(self, item_ids: Iterable[str]) -> None:
        ids = [i for i in item_ids if self.find(i) is not None]
        for item_id in ids:
            found = self.find(item_id)
            assert found is not None
            found["nudged"] = True
        self.data["nudges"] += 1
        self._op("nudge", ids)

    def count_failed_extraction(self) -> None:
        self.data["extract_failed"] += 1
        self._op("extract_failed")

    def _bound(self) -> None:
        """At most MAX_ITEMS: drop the oldest settled ones first, else the oldest."""
        while len(self.items) > MAX_ITEMS:
            settled = next((i for i in self.items if i["status"] != OPEN), None)
            self.items.remove(settled if settled is not None else self.items[0])


def replay(stored: Mapping[str, Any] | None, ops: list[list[Any]]) -> dict[str, Any]:
    """Apply a turn's logged changes to the ledger as stored now."""
    ledger = Ledger.of(stored)
    ledger.log = False
    ids: dict[str, str | None] = {}  # the turn's id -> the id here

    def here(item_id: str) -> str:
        return ids.get(item_id) or item_id

    for op in ops:
        kind = op[0]
        if kind == "reset":
            ledger.reset()
        elif kind == "add":
            turn_id, item = op[1], op[2]
            new_id = ledger.add(item)
            if new_id is None:  # already read by a racing turn: the same obligation there, if any
                what, target = fold(item.get("what")).lower(), fold(item.get("target")).lower()
                match = next((i for i in ledger.items if (i["what"].lower(), i["target"].lower()) == (what, target)), None)
                new_id = match["id"] if match else None
            ids[turn_id] = new_id
        elif kind == "read":
            ledger.read(op[1], op[2])
        elif kind == "settle":
            ledger.settle(here(op[1]), op[2], op[3])
        elif kind == "consent":
            ledger.consent(here(op[1]), op[2])
        elif kind == "nudge":
            ledger.nudge(here(i) for i in op[1])
        elif kind == "extract_failed":
            ledger.count_failed_extraction()
    return ledger.data


# --- Settling -------------------------------------------------------------------
@dataclass
class Settlement:
    item_ids: list[str]
    status: str
    by: str


def settle_call(open_items: list[dict[str, Any]], call: Call, declared: Mapping[str, Effect]) -> Settlement | None:
    """Which open obligations a successful write call carries out (or hands off)."""
    if not call.ok or call_effect(call.name, declared) != WRITE:
        return None
    eligible = [i for i in open_items if i["turn"] <= call.turn]
    if not eligible:
        return None
    if is_transfer(call.name):
        return Settlement([i["id"] for i in eligible], DECLINED, f"transfer:{call.name}")
    call_ids = id_tokens(call.arguments)
    # Named this tool, and no target id the call does not carry.
    strong = [i for i in eligible if call.name in i["tools"] and not (id_tokens(i["target"]) - call_ids)]
    if strong:
        scored = [(len(id_tokens([i["what"], i["target"], i["constraints"]]) & call_ids), i) for i in strong]
        best = max(score for score, _ in scored)
        top = [i for score, i in scored if score == best]
        if best > 0 or len(top) == 1:
            return Settlement([top[0]["id"]], SATISFIED, f"tool:{call.name}")
        return None  # several equally likely and no shared id: left for the final-reply judgement
    call_words = words(call.name.replace("_", " ")) | words(call.arguments)
    weak = [
        i for i in eligible
        if id_tokens([i["what"], i["target"]]) & call_ids and words([i["what"], i["target"]]) & call_words
    ]  # fmt: skip
    if len(weak) == 1:
        return Settlement([weak[0]["id"]], SATISFIED, f"tool:{call.name}")
    return None
