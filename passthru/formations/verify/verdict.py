"""Reading the checker's answer, strictly (passthru/formations/framing.py).

The checker is asked for one JSON object. Models put a sentence before it,
fence it or think aloud first, perhaps quoting a `{"verdict": ...}` they read
in the conversation: the verdict is the reply's *last* top-level JSON object,
and it must have the asked shape exactly (`verdict` approve or revise, a
`fix` string, a `conflict` object with `quote`, `call`, `argument`; no other
key). Anything else is unreadable (None): the formation then fails open and
returns the draft, as when the checker is down."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kernel.conversation import digest
from passthru.formations.framing import last_object, only_keys
from passthru.formations.verify.guard import Conflict

_NULLS = {"", "null", "none", "n/a", "-"}
_VERDICT_KEYS = frozenset({"verdict", "fix", "conflict"})
_CONFLICT_KEYS = frozenset({"quote", "call", "argument"})


@dataclass(frozen=True)
class Verdict:
    decision: Literal["approve", "revise"]
    fix: str = ""
    conflict: Conflict | None = None

    @property
    def approves(self) -> bool:
        return self.decision == "approve"

    def as_detail(self, bodies: bool) -> dict[str, Any]:
        """What the trace keeps of the verdict. The fix and the quote are the
        checker's words, often the conversation's: with bodies off
        (MARINA_TRACE_BODIES) only their lengths and hashes, never the text."""
        detail: dict[str, Any] = {"verdict": self.decision}
        if self.fix:
            detail.update({"fix": self.fix[:500]} if bodies else text_shape("fix", self.fix))
        if self.conflict is not None:
            c = self.conflict
            cited = {"quote": c.quote[:500]} if bodies else text_shape("quote", c.quote)
            detail["conflict"] = {**cited, "call": c.call, "argument": c.argument}
        return detail


def text_shape(name: str, text: str) -> dict[str, Any]:
    """A text's length and hash in place of its words (`fix_chars`, `fix_hash`)."""
    return {f"{name}_chars": len(text), f"{name}_hash": digest([text])}


def _text(value: Any) -> str | None:
    if not isinstance(value, str) or value.strip().lower() in _NULLS:
        return None
    return value.strip()


_MALFORMED = object()


def _conflict(raw: Any) -> Conflict | None | object:
    """The cited conflict, None when there is none, _MALFORMED when its shape is wrong."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or not only_keys(raw, _CONFLICT_KEYS):
        return _MALFORMED
    if any(value is not None and not isinstance(value, str) for value in raw.values()):
        return _MALFORMED
    quote = _text(raw.get("quote"))
    if quote is None:
        return None
    return Conflict(quote=quote, call=_text(raw.get("call")), argument=_text(raw.get("argument")))


def parse_verdict(text: str | None) -> Verdict | None:
    """The checker's verdict, or None when it is unreadable."""
    obj = last_object(text)
    if obj is None or not only_keys(obj, _VERDICT_KEYS) or not isinstance(obj.get("verdict"), str):
        return None
    decision = obj["verdict"].strip().lower()
    if decision == "approve":
        contradicted = _text(obj.get("fix")) is not None or obj.get("conflict") is not None
        return None if contradicted else Verdict("approve")
    if decision != "revise":
        return None
    if obj.get("fix") is not None and not isinstance(obj.get("fix"), str):
        return None
    fix = _text(obj.get("fix"))
    conflict = _conflict(obj.get("conflict"))
    if fix is None or conflict is _MALFORMED:
        return None  # a revise with nothing to do, or a conflict in another shape, cannot be acted on
    assert conflict is None or isinstance(conflict, Conflict)
    return Verdict("revise", fix, conflict)
