"""Playing the scripted upstream for the stacked formations: every call is
told apart by its prompt (extraction, obligations judge, argument judge,
verify checker, the agent's draft or its retry) and answered from a script."""
from __future__ import annotations

import json
import os
from typing import Any

from passthru.formations.argcheck import prompts as argcheck_prompts
from passthru.formations.obligations import prompts as obligations_prompts
from passthru.formations.verify.prompts import CHECKER_MARKER, REVISION_MARKER
from tests.conftest import MARINA_KEY
from tests.upstream import Reply, Reset, ScriptedUpstream, completion, tool_call

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_order_details",
            "description": "Get the status and details of an order.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "cancel_pending_order",
            "description": "Cancel a pending order.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}, "reason": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {"name": "transfer_to_human_agents", "description": "Transfer the user to a human agent.", "parameters": {"type": "object", "properties": {"summary": {"type": "string"}}}},
    },
]
POLICY = "You are a retail agent. Confirm with the user before cancelling an order."
OPENING = [
    {"role": "system", "content": POLICY},
    {"role": "user", "content": "Please cancel order #W1234567, I ordered it by mistake."},
]


def role_of(body: dict[str, Any]) -> str:
    first, last = body["messages"][0], body["messages"][-1]
    system = str(first.get("content")) if first.get("role") == "system" else ""
    if system.startswith(obligations_prompts.EXTRACT_MARKER):
        return "extract"
    if system.startswith(obligations_prompts.JUDGE_MARKER):
        return "judge"
    if system.startswith(argcheck_prompts.JUDGE_MARKER):
        return "argjudge"
    if system.startswith(CHECKER_MARKER):
        return "review"
    if last.get("role") == "system" and REVISION_MARKER in str(last.get("content")):
        return "revision"
    tail = json.dumps(last.get("content"))
    if obligations_prompts.NUDGE_MARKER in tail or argcheck_prompts.NOTE_MARKER in tail:
        return "retry"
    return "main"


class Play:
    """Scripts per role; `calls` is the order the roles were called in."""

    def __init__(self, upstream: ScriptedUpstream, **steps: Reply | Reset | list[Reply | Reset]) -> None:
        self.calls: list[str] = []
        self.bodies: dict[str, list[dict[str, Any]]] = {}
        self.queues = {k: list(v) if isinstance(v, list) else [v] for k, v in steps.items()}
        upstream.handler = self.handle

    def handle(self, body: Any) -> Reply | Reset:
        role = role_of(body)
        self.calls.append(role)
        self.bodies.setdefault(role, []).append(body)
        queue = self.queues.get(role)
        if not queue:
            raise AssertionError(f"unexpected {role} call")
        return queue.pop(0) if len(queue) > 1 else queue[0]

    def script(self, **steps: Reply | Reset | list[Reply | Reset]) -> None:
        self.calls.clear()
        self.bodies.clear()
        self.queues = {k: list(v) if isinstance(v, list) else [v] for k, v in steps.items()}


def text(content: str, cost: float = 0.001) -> Reply:
    return Reply(json=completion(content, prompt_tokens=100, completion_tokens=10, cost=cost))


def json_reply(value: Any, cost: float = 0.0001) -> Reply:
    return Reply(json=completion(json.dumps(value), prompt_tokens=50, completion_tokens=5, cost=cost))


def calls(*items: tuple[str, dict[str, Any]], cost: float = 0.001) -> Reply:
    return Reply(
        json=completion(
            None,
            tool_calls=[tool_call(name, args, f"c{i}") for i, (name, args) in enumerate(items)],
            prompt_tokens=100,
            completion_tokens=10,
            cost=cost,
        )
    )


def extracted(*adds: dict[str, Any], cancel: list[str] | None = None) -> Reply:
    return json_reply({"add": list(adds), "cancel": cancel or []})


CANCEL_OBLIGATION = {"request": 1, "what": "cancel order #W1234567", "target": "#W1234567", "tools": ["cancel_pending_order"]}


def open_state(raw: Any, *conversations: Any) -> dict[str, Any]:
    """A formation_state row's state (a dict, or JSON text on SQLite), opened with
    the sealer of whichever of `conversations` (passthru.formations.state.Conversation) sealed it."""
    from passthru.formations.seal import Unreadable

    stored = raw if isinstance(raw, dict) else json.loads(raw)
    for conv in conversations:
        try:
            plain = conv.sealer.open(stored)
        except Unreadable:
            continue
        assert plain is not None, "the row is sealed"
        opened: dict[str, Any] = json.loads(plain)
        return opened
    raise AssertionError("no conversation opens the row")


def tau2_litellm(base_url: str, model: str, messages: list[dict[str, Any]], *, stream: bool = False) -> Any:
    """An agent turn as τ² makes it: LiteLLM with `openai/<id>`, Marina as api_base,
    the reasoning effort in extra_body, drop_params on, no retries."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # offline: before litellm is imported
    import litellm

    litellm.drop_params = True
    return litellm.completion(
        model=f"openai/{model}",
        messages=messages,
        tools=TOOLS,
        api_base=f"{base_url}/v1",
        api_key=MARINA_KEY,
        extra_body={"reasoning_effort": "high"},
        num_retries=0,
        stream=stream,
    )
