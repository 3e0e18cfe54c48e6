"""Marina's formations, named once: each one's name, the model-id prefix it
answers to, what it does, whether it stacks, whether it makes a τ² submission
custom, and its opt-in header. Everything that names a formation reads this
table: passthru's dispatch (passthru/formations/), the crew admin's checks,
the read API (/api/formations), the submission rules
(ledger/benchmarks/submission.py), the formation decisions read from traces
(ledger/benchmarks/decisions.py), the τ² kit's arms (repro/arms.py) and the
demo. Adding a formation starts here, then its folder in passthru/formations/.

In kernel, below every app, so that each layer may read it: it imports no app."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# A crew (passthru/crews.py) is `marina:<name>`: not a formation, but the ids
# that name one are told apart from formation ids by this prefix.
CREW_PREFIX = "marina:"


@dataclass(frozen=True)
class Entry:
    name: str  # the route and span name, and the arm's layer in a submission
    prefix: str  # the model-id prefix it answers to, followed by the id it wraps
    description: str  # what it adds to the agent's turn (/api/formations, a submission's methodology)
    stacks: bool  # stacks with the other stacking prefixes in any order, around a plain or verify id
    custom: bool = True  # a τ² submission whose agent uses it is custom, not standard
    header: str = ""  # the header that turns it on for a plain model id ('' for none)
    # Whether it changes the agent's own prompt: True, False, or None (partly: verify's proposer
    # keeps the benchmark's prompt, its checker is Marina's).
    changes_prompt: bool | None = False
    model: str = "the model it wraps"  # what `<model>` in its template stands for

    @property
    def template(self) -> str:
        """The id template people read (`marina/verify:<model>`)."""
        return f"{self.prefix}<model>"

    def wrap(self, model_id: str) -> str:
        return self.prefix + model_id


VERIFY = Entry(
    "verify",
    "marina/verify:",
    "each agent turn is drafted by the proposer, reviewed by an independent checker model against the "
    "conversation, the policy and the tool catalogue, and revised at most once; write calls (bookings, "
    "payments, cancellations) are held unless the checker cites a verbatim conflict",
    stacks=False,
    changes_prompt=None,
    model="the proposer (`<proposer>+<checker>` names the checker too)",
)
OBLIGATIONS = Entry(
    "obligations",
    "marina/obligations:",
    "the user's requests are kept as obligations across turns; a final reply that leaves one owed is "
    "judged by a model and retried once",
    stacks=True,
    header="x-marina-obligations",
)
ARGCHECK = Entry(
    "argcheck",
    "marina/argcheck:",
    "a write call holding a value neither the user nor a tool stated is judged by a model and retried once",
    stacks=True,
    header="x-marina-argcheck",
)
LESSONS = Entry(
    "lessons",
    "marina/lessons:",
    "lessons learned from earlier failed runs that match the conversation's opening request are added "
    "to the agent's prompt",
    stacks=True,
    header="x-marina-lessons",
    changes_prompt=True,
)

# In the order they are listed (and peeled off an id).
ALL: tuple[Entry, ...] = (VERIFY, OBLIGATIONS, ARGCHECK, LESSONS)
BY_NAME: Mapping[str, Entry] = {entry.name: entry for entry in ALL}
PREFIXES: tuple[str, ...] = tuple(entry.prefix for entry in ALL)
# The prefixes that wrap another formation's id (and so must come before a verify id).
STACKING_PREFIXES: tuple[str, ...] = tuple(entry.prefix for entry in ALL if entry.stacks)


def stacked(model_id: str, *names: str) -> str:
    """`model_id` wrapped by the formations `names`, outermost first."""
    for name in reversed(names):
        model_id = BY_NAME[name].wrap(model_id)
    return model_id


def holds_decision(span_name: str, detail: Mapping[str, Any]) -> bool:
    """Whether a span records a formation decision: a verify run, or the
    stack's span with its obligations / argcheck header. The ledger's trace
    writer keeps these spans, and only these, with MARINA_TRACE_STORE=otel
    (ledger/spend/trace_writer.py); ledger/benchmarks/decisions.py reads them
    (its links' query is the same test)."""
    return span_name == VERIFY.name or OBLIGATIONS.name in detail or ARGCHECK.name in detail
