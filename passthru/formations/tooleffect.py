"""Read or write: does calling a tool change anything?

Formations hold state-changing calls to stricter rules than lookups, so they
need to know which is which from the tool's declaration alone. The order of
evidence, strongest first:

1. Declared hints (MCP-style `annotations`, at the tool's top level or under
   `function`): `readOnlyHint: true` is read-only; `readOnlyHint: false` or
   `destructiveHint: true` is a write.
2. A lookup-style name: the first word of the name (split on `_ - . / :` and
   camelCase) is a lookup verb (`get_…`, `list_…`, `find_…`, `search_…`,
   `check_…`, `calculate`, `think`, …) or asks a question (`is_…`, `has_…`,
   `can_…`).
3. A description that leads with a lookup verb (`Returns …`, `Shows …`,
   `Measures …`, after filler such as "This tool …") and names no change
   anywhere (no `update`, `cancel`, `send`, `set`, `toggle`, …).

Everything else writes: an unknown tool is assumed to change state, because
wrongly holding a lookup costs a little freedom while wrongly freeing a write
could let a revision change an order or a payment."""
from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

Effect = Literal["read_only", "write"]

READ_ONLY: Effect = "read_only"
WRITE: Effect = "write"

# First word of a lookup-style tool name.
LOOKUP_NAME_VERBS = frozenset(
    {
        "get", "list", "find", "search", "lookup", "look", "read", "fetch", "query", "calculate",
        "calc", "compute", "estimate", "check", "describe", "show", "view", "count", "think",
        "retrieve", "validate", "preview", "inspect", "status", "browse", "explore", "recall",
        "measure", "peek",
        # Questions: is_eligible, has_permission, can_send_mms.
        "is", "has", "can",
    }
)  # fmt: skip

# A description's leading verb that reads (any inflection listed).
_LOOKUP_DESCRIPTION_VERBS = frozenset(
    {
        "get", "gets", "list", "lists", "find", "finds", "search", "searches", "look", "looks",
        "read", "reads", "fetch", "fetches", "query", "queries", "calculate", "calculates",
        "compute", "computes", "estimate", "estimates", "check", "checks", "describe", "describes",
        "show", "shows", "display", "displays", "view", "views", "count", "counts", "retrieve",
        "retrieves", "return", "returns", "validate", "validates", "preview", "previews",
        "inspect", "inspects", "measure", "measures", "report", "reports", "tell", "tells",
        "lookup", "browse", "browses",
    }
)  # fmt: skip

# Words that name a change. A description containing any of them is not
# trusted as read-only, whatever verb it leads with.
_CHANGE_WORDS = frozenset(
    {
        "add", "adds", "added", "adding", "apply", "applies", "approve", "approves", "assign",
        "assigns", "book", "books", "booked", "buy", "buys", "cancel", "cancels", "cancelled",
        "canceled", "change", "changes", "changed", "charge", "charged", "clear", "clears", "close",
        "closes", "connect", "connects", "create", "creates", "created", "delete", "deletes",
        "deleted", "disable", "disables", "disconnect", "disconnects", "edit", "edits", "enable",
        "enables", "exchange", "exchanges", "grant", "grants", "insert", "inserts", "make", "makes",
        "modify", "modifies", "modified", "move", "moves", "pay", "pays", "purchase", "purchases",
        "refund", "refunds", "register", "registers", "remove", "removes", "removed", "rename",
        "renames", "reset", "resets", "restart", "restarts", "resume", "resumes", "revoke",
        "revokes", "save", "saves", "schedule", "schedules", "send", "sends", "sent", "set", "sets",
        "submit", "submits", "suspend", "suspends", "toggle", "toggles", "transfer", "transfers",
        "update", "updates", "updated", "upgrade", "upgrades", "write", "writes",
    }
)  # fmt: skip

# Filler that may open a description before its verb: "This tool returns …",
# "Use this to look up …", "Tool that gets …".
_FILLER = re.compile(
    r"^(?:(?:this|the)\s+(?:tool|function|method|endpoint)\s+(?:will\s+|that\s+|which\s+)?"
    r"|(?:a\s+)?(?:tool|function|method)\s+(?:to|that|which)\s+"
    r"|use\s+(?:this|it)\s+(?:tool\s+)?to\s+"
    r"|used\s+to\s+"
    r"|(?:helps?|allows?\s+you)\s+(?:to\s+)?)",
    re.IGNORECASE,
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NAME_SPLIT = re.compile(r"[_\-./:\s]+")
_WORD = re.compile(r"[a-z]+")


def name_words(name: str) -> list[str]:
    """`getUserDetails` and `get_user_details` both give ['get', 'user', 'details']."""
    return [w.lower() for w in _NAME_SPLIT.split(_CAMEL.sub("_", name)) if w]


def _function(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    fn = tool.get("function")
    return fn if isinstance(fn, Mapping) else tool


def _hint(tool: Mapping[str, Any]) -> Effect | None:
    for holder in (tool, _function(tool)):
        annotations = holder.get("annotations")
        if not isinstance(annotations, Mapping):
            continue
        if annotations.get("readOnlyHint") is True:
            return READ_ONLY
        if annotations.get("readOnlyHint") is False or annotations.get("destructiveHint") is True:
            return WRITE
    return None


# Both are pure and τ² declares the same tools on every turn: a request's
# classification then costs dictionary look-ups instead of regex passes over
# every description (~0.3 ms per request for τ²'s airline tools, bench/formations.py).
@functools.lru_cache(maxsize=4096)
def name_reads(name: str) -> bool:
    words = name_words(name)
    return bool(words) and words[0] in LOOKUP_NAME_VERBS


@functools.lru_cache(maxsize=4096)
def description_reads(description: str) -> bool:
    """Leads with a lookup verb and names no change anywhere."""
    text = _FILLER.sub("", description.strip())
    words = _WORD.findall(text.lower())
    if not words:
        return False
    if words[0] not in _LOOKUP_DESCRIPTION_VERBS:
        return False
    return not any(w in _CHANGE_WORDS for w in words)


def classify(tool: Mapping[str, Any]) -> Effect:
    """The effect of one declared tool (OpenAI `{"type":"function","function":{...}}` shape, or bare)."""
    hinted = _hint(tool)
    if hinted is not None:
        return hinted
    fn = _function(tool)
    name = fn.get("name")
    if isinstance(name, str) and name_reads(name):
        return READ_ONLY
    description = fn.get("description")
    if isinstance(description, str) and description_reads(description):
        return READ_ONLY
    return WRITE


def effects(tools: Iterable[Any] | None) -> dict[str, Effect]:
    """Tool name -> effect for a request's `tools` array (malformed entries skipped)."""
    found: dict[str, Effect] = {}
    for tool in tools or ():
        if not isinstance(tool, Mapping):
            continue
        name = _function(tool).get("name")
        if isinstance(name, str) and name:
            found[name] = classify(tool)
    return found


def call_effect(name: str, declared: Mapping[str, Effect]) -> Effect:
    """The effect of a call: by its declaration, else by its name alone (undeclared tools write)."""
    if name in declared:
        return declared[name]
    return READ_ONLY if name_reads(name) else WRITE
