"""The kit's arms: what τ²'s agent model is in each, and the group it is filed under.

`single` is the answer model itself; `verify` wraps it as
`marina/verify:<model>[+<checker>]` (the checker only when it differs);
`obligations`, `argcheck` and `obligations+argcheck` stack Marina's checks on
it; `lessons` is `marina/lessons:<model>`; `marina:<crew>` is that crew. A
single model is a standard leaderboard submission, every other arm a custom one."""
from __future__ import annotations

import re
from dataclasses import dataclass

from kernel import formations

DEFAULT_ARMS = ("single", "verify")
NAMED_ARMS = ("single", "verify", "obligations", "argcheck", "obligations+argcheck", "lessons")
CREW_PREFIX = formations.CREW_PREFIX
_CREW = re.compile(r"^marina:[a-z0-9][a-z0-9._-]{0,62}$")
_NOT_IN_GROUPS = re.compile(r"[^A-Za-z0-9:._@/-]")  # the ledger's group alphabet


@dataclass(frozen=True)
class Arm:
    name: str
    agent_model: str  # the id Marina serves, as τ²'s agent asks for it (after LiteLLM's openai/)
    target_kind: str  # model | crew

    def group(self, domain: str) -> str:
        """`tau2-<domain>-<arm>`, characters outside the group alphabet as `_`."""
        return _NOT_IN_GROUPS.sub("_", f"tau2-{domain}-{self.name}")

    @property
    def slug(self) -> str:
        """The arm as part of a file name."""
        return re.sub(r"[^A-Za-z0-9._-]", "_", self.name)

    @property
    def submission(self) -> str:
        return "standard" if self.name == "single" else "custom"


class ArmError(ValueError):
    pass


def agent_model(name: str, model: str, checker: str | None) -> str:
    """The id an arm's agent asks for: a formation's arm is the model wrapped in
    its prefixes (kernel/formations.py), `a+b` stacking both, outermost first."""
    if name == "single":
        return model
    if name == formations.VERIFY.name:
        return formations.VERIFY.wrap(model) + (f"+{checker}" if checker and checker != model else "")
    if name in NAMED_ARMS:
        return formations.stacked(model, *name.split("+"))
    if _CREW.match(name):
        return name
    raise ArmError(
        f"unknown arm {name!r}: choose from {', '.join(NAMED_ARMS)} or marina:<crew>"
    )


def parse_arms(text: str | None, *, model: str, checker: str | None) -> list[Arm]:
    """`--arm a,b,…` (default single,verify) in order, the first the baseline; refuses unknown and repeated arms."""
    names = [n.strip() for n in (text or ",".join(DEFAULT_ARMS)).split(",") if n.strip()]
    if not names:
        raise ArmError("--arm names no arm")
    seen: set[str] = set()
    arms = []
    for name in names:
        if name in seen:
            raise ArmError(f"arm {name!r} is given twice")
        seen.add(name)
        kind = "crew" if name.startswith(CREW_PREFIX) else "model"
        arms.append(Arm(name, agent_model(name, model, checker), kind))
    return arms
