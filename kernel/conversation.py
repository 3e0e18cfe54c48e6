"""What identifies the conversation a chat request belongs to, without keeping
any of its content: the `seed` from the body and two short hashes.

τ² sends no per-simulation header; it sends the trial's `seed` in every agent
and user-simulator request, and every request of one conversation repeats the
same opening (docs/ledger-format.md, "Items linked to their traces"):

- `opening`: a hash of the first two non-system messages, role and text. For
  τ²'s agent that is its fixed greeting and the user simulator's first words;
  for the user simulator (roles flipped) the same two texts with the roles
  swapped, from its second call on. The benchmark importer computes both
  variants from the simulation's stored messages, so it can tell the agent's
  calls from the user simulator's even when both use one model id.
- `system`: a hash of the system (and developer) texts: lets the importer link
  the user simulator's first call, which has only the greeting, through the
  system prompt its later, already linked calls share.

Both are the first 16 hex digits of a SHA-256 (64 bits): enough to keep apart
the conversations of one run's time window, too short and too lossy to carry
the text. Computing them costs one pass over the first messages, not the body.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

HASH_CHARS = 16
_SYSTEM_ROLES = ("system", "developer")
_BIGINT = 2**63


@dataclass(frozen=True)
class Identity:
    seed: int | None = None
    opening: str = ""
    system: str = ""


NONE = Identity()


def text_of(content: Any) -> str:
    """A message's text: the string, or the text parts of a content list, joined.
    Stripped, so a trailing newline a client adds or drops does not matter."""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return "\n".join(p for p in parts if isinstance(p, str)).strip()
    return ""


def digest(parts: Iterable[str]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()[:HASH_CHARS]


def opening_hash(first_two: Iterable[tuple[str, str]]) -> str:
    """The hash of an opening given as (role, text) pairs (at most two are used)."""
    parts: list[str] = []
    for role, text in list(first_two)[:2]:
        parts += [role, text]
    return digest(parts) if parts else ""


def identify(body: dict[str, Any]) -> Identity:
    """The identity of a parsed chat-completions body; fields left empty when
    the body has no seed, or no messages of that kind."""
    seed = body.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or not -_BIGINT <= seed < _BIGINT:
        seed = None
    messages = body.get("messages")
    if not isinstance(messages, list):
        return Identity(seed=seed)
    system: list[str] = []
    first: list[tuple[str, str]] = []
    for m in messages:
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if role in _SYSTEM_ROLES:
            system.append(text_of(m.get("content")))
        elif isinstance(role, str) and len(first) < 2:
            first.append((role, text_of(m.get("content"))))
    return Identity(seed=seed, opening=opening_hash(first), system=digest(system) if system else "")
