"""Write tests/fixtures/tau2/tools-banking_knowledge.json from sierra's τ² (run with its Python).

    TAU2_DATA_DIR=~/.cache/marina/tau2-sierra-src/data \\
        ~/.cache/marina/tau2-sierra-venv/bin/python scripts/tau2_banking_tools.py > tests/fixtures/tau2/tools-banking_knowledge.json

Every tool of banking_knowledge as τ² declares it: the agent's (with `bm25_grep`'s KB_search and grep,
the discoverable tools the knowledge base unlocks, and the other retrieval configs' search tools,
KB_search_bm25, KB_search_dense and shell, read from their mixins: building those configs needs
embeddings or a sandbox) and the user simulator's; each with its OpenAI schema and τ²'s own type."""
from __future__ import annotations

import inspect
import json
from typing import Any

import tau2.domains.banking_knowledge.retrieval_mixins as mixins
from tau2.domains.banking_knowledge.environment import get_environment
from tau2.environment.tool import as_tool
from tau2.environment.toolkit import TOOL_TYPE_ATTR


def entry(name: str, func: Any, kind: Any) -> dict[str, Any]:
    return {"name": name, "tau2_type": getattr(kind, "value", str(kind)), "openai_schema": as_tool(func).openai_schema}


def main() -> None:
    out: dict[str, dict[str, Any]] = {"agent_tools": {}, "user_tools": {}}
    env = get_environment(retrieval_variant="bm25_grep")
    for side, kit in (("agent_tools", env.tools), ("user_tools", env.user_tools)):
        for name, func in kit.tools.items():
            out[side][name] = entry(name, func, kit.tool_type(name))
        for name, func in kit.get_discoverable_tools().items():
            out[side][name] = entry(name, func, getattr(func, TOOL_TYPE_ATTR))
    for _, cls in inspect.getmembers(mixins, inspect.isclass):
        for name, member in vars(cls).items():
            if callable(member) and hasattr(member, TOOL_TYPE_ATTR) and name not in out["agent_tools"]:
                out["agent_tools"][name] = entry(name, member.__get__(object.__new__(cls), cls), getattr(member, TOOL_TYPE_ATTR))
    print(json.dumps({side: list(tools.values()) for side, tools in out.items()}, indent=1))


if __name__ == "__main__":
    main()
