"""What the judge model is told about one failed simulation, and how its
answer is read. The conversation and τ²'s reward breakdown go into the prompt
only; what comes back is checked by the leak guard before anything is kept."""
from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

LEARN_MARKER = "You study a failed conversation of a customer-service agent"
MAX_LESSONS_PER_FAILURE = 2
TURN_CHARS = 1500
CONVERSATION_CHARS = 40_000
BREAKDOWN_CHARS = 8_000

SYSTEM = f"""{LEARN_MARKER} (a benchmark simulation whose reward was below 1)
and write at most {MAX_LESSONS_PER_FAILURE} short, general rules that would have prevented the failure
in any similar conversation.

Each rule:
- is one sentence of at most 300 characters, an instruction to the agent;
- is general: it names NO id, reservation or order number, amount, price, date, person, city or
  other detail of this conversation, and quotes nothing from it; tool names may be named;
- has a domain: "tools" (how and when to call tools, their arguments, their order) or "code"
  (policy and procedure: what to check, confirm or refuse).

Answer with JSON only:
{{"lessons": [{{"domain": "tools", "rule": "..."}}]}}
An empty list is a fine answer when nothing general can be learned."""

_BREAKDOWN_KEYS = (
    "reward", "reward_basis", "reward_breakdown", "db_check", "action_checks",
    "env_assertions", "nl_assertions", "communicate_checks",
)  # fmt: skip


def _clamp(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 6] + " […]"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    return ""


def render_conversation(messages: Sequence[Any]) -> str:
    """One line (or block) per turn: who spoke, what they said or called."""
    lines = []
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        role = str(message.get("role") or "?")
        said = _text(message.get("content")).strip()
        if said:
            lines.append(f"[{role}] {_clamp(said, TURN_CHARS)}")
        for call in message.get("tool_calls") or ():
            if not isinstance(call, Mapping):
                continue
            inner = call.get("function")
            fn: Mapping[str, Any] = inner if isinstance(inner, Mapping) else call  # OpenAI's shape, or τ²'s flat one
            arguments = fn.get("arguments")
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments, ensure_ascii=False)
            lines.append(f"[{role} calls] {fn.get('name')}({_clamp(arguments, TURN_CHARS)})")
    text = "\n".join(lines)
    return _clamp(text, CONVERSATION_CHARS)


def render_breakdown(reward_info: Mapping[str, Any]) -> str:
    kept = {k: reward_info[k] for k in _BREAKDOWN_KEYS if reward_info.get(k) not in (None, [], {})}
    return _clamp(json.dumps(kept, ensure_ascii=False, indent=1), BREAKDOWN_CHARS)


def judge_messages(messages: Sequence[Any], reward_info: Mapping[str, Any], *, domain: str) -> list[dict[str, str]]:
    user = (
        f"Benchmark domain: {domain}\n\n"
        f"CONVERSATION\n{render_conversation(messages)}\n\n"
        f"REWARD BREAKDOWN (what the evaluator expected and found)\n{render_breakdown(reward_info)}"
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


@dataclass(frozen=True)
class Proposal:
    domain: str
    rule: str


def parse(text: str) -> list[Proposal] | None:
    """The judge's proposals; None when its answer holds no readable JSON object."""
    match = re.search(r"\{.*\}", text, re.DOTALL)
    if not match:
        return None
    try:
        value = json.loads(match.group())
    except ValueError:
        return None
    items = value.get("lessons") if isinstance(value, Mapping) else None
    if not isinstance(items, list):
        return None
    out = []
    for item in items[:MAX_LESSONS_PER_FAILURE]:
        if isinstance(item, Mapping) and isinstance(item.get("rule"), str) and item["rule"].strip():
            domain = item.get("domain") if item.get("domain") in ("tools", "code") else "code"
            out.append(Proposal(str(domain), item["rule"].strip()))
    return out
