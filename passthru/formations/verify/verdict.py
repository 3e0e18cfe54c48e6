"""Reading the checker's answer.

The checker is asked for one JSON object; models wrap it in code fences, put
a sentence before it or reason aloud after it, so the parser looks for the
first JSON object that carries a `verdict`. Anything it cannot read as
approve, or revise with a fix, is unreadable (None): the formation then fails
open and returns the draft."""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from passthru.formations.verify.guard import Conflict

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_NULLS = {"", "null", "none", "n/a", "-"}


@dataclass(frozen=True)
class Verdict:
    decision: Literal["approve", "revise"]
    fix: str = ""
    conflict: Conflict | None = None

    @property
    def approves(self) -> bool:
        return self.decision == "approve"

    def as_detail(self) -> dict[str, Any]:
        detail: dict[str, Any] = {"verdict": self.decision}
        if self.fix:
            detail["fix"] = self.fix[:500]
        if self.conflict is not None:
            detail["conflict"] = self.conflict.as_detail()
        return detail


def _objects(text: str) -> list[Any]:
    """JSON objects found in `text`: fenced blocks first, then every `{` that starts one."""
    found: list[Any] = []
    decoder = json.JSONDecoder()
    for candidate in [*_FENCE.findall(text), text]:
        for start in (m.start() for m in re.finditer(r"\{", candidate)):
            try:
                value, _ = decoder.raw_decode(candidate, start)
            except ValueError:
                continue
            found.append(value)
    return found


def _text(value: Any) -> str | None:
    if not isinstance(value, str) or value.strip().lower() in _NULLS:
        return None
    return value.strip()


def _conflict(raw: Any) -> Conflict | None:
    if not isinstance(raw, Mapping):
        return None
    quote = _text(raw.get("quote"))
    if quote is None:
        return None
    argument = next((_text(raw.get(k)) for k in ("argument", "field", "path") if _text(raw.get(k))), None)
    return Conflict(quote=quote, call=_text(raw.get("call")), argument=argument)


def parse_verdict(text: str | None) -> Verdict | None:
    """The checker's verdict, or None when it is unreadable."""
    if not text:
        return None
    for obj in _objects(text):
        if not isinstance(obj, Mapping) or not isinstance(obj.get("verdict"), str):
            continue
        decision = obj["verdict"].strip().lower()
        if decision in ("approve", "approved"):
            return Verdict("approve")
        if decision in ("revise", "revision", "revised"):
            fix = _text(obj.get("fix")) or _text(obj.get("issues"))
            if fix is None:
                return None  # a revise with nothing to do cannot be acted on
            return Verdict("revise", fix, _conflict(obj.get("conflict")))
        return None
    return None
