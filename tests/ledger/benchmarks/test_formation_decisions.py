"""Per-item formation decisions (ledger/benchmarks/decisions.py): the real
stacked formations answer through Marina in-process (the scripted upstream plays
the agent, the extractor and the judges), their traces are linked to items,
and each item's decisions and counters are what the response headers said;
then `compare` breaks a difference down by them."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

import openai
import pytest
from django.utils import timezone

from kernel.conversation import identify
from ledger.benchmarks import decisions
from ledger.benchmarks.compare import compare_runs
from ledger.benchmarks.compare_text import render_text
from ledger.benchmarks.items import LedgerItem
from ledger.benchmarks.links import plan_links
from ledger.models import BenchmarkItem
from ledger.reports.compare_json import as_json
from tests.conftest import MARINA_KEY
from tests.ledger.builders import make_run
from tests.passthru.formations.play import (
    CANCEL_OBLIGATION,
    OPENING,
    TOOLS,
    Play,
    calls,
    extracted,
    json_reply,
    text,
)

STACK = "marina/obligations:marina/argcheck:marina/verify:openrouter/agent+openrouter/checker"
CANCEL_STATED = ("cancel_pending_order", {"order_id": "#W1234567", "reason": "mistake"})
CANCEL_INVENTED = ("cancel_pending_order", {"order_id": "#W7654321", "reason": "mistake"})
APPROVE = json_reply({"verdict": "approve"})
# τ²'s agent opens with a fixed greeting; the item's hash covers it and the user's first words.
# A second task's opening too: the formations' state is keyed by the conversation.
GREETING = {"role": "assistant", "content": "Hi! How can I help you today?"}
OPENING_1 = [OPENING[0], GREETING, OPENING[1]]
OPENING_2 = [OPENING[0], GREETING, {"role": "user", "content": "Cancel my order #W1234567 please, I ordered it by mistake."}]


def _ask(client: openai.OpenAI, seed: int, messages: list[dict[str, Any]]) -> dict[str, str]:
    raw = client.chat.completions.with_raw_response.create(
        model=STACK, messages=messages, tools=TOOLS, seed=seed
    )
    return {k: v for k, v in raw.headers.items() if k.startswith("x-marina-")}


def _item(item_id: str, seed: int, started: Any, opening: list[dict[str, Any]]) -> LedgerItem:
    return LedgerItem(
        id=item_id, task_id=item_id.split("#")[0], trial=0, reward=1.0, termination_reason="user_stop",
        start_time=started.isoformat(), end_time=(timezone.now() + timedelta(seconds=1)).isoformat(),
        seed=seed, opening_agent=identify({"messages": opening}).opening,
    )  # fmt: skip


@pytest.mark.django_db(transaction=True)
def test_stacked_formations_decisions_and_counters_per_item(marina, upstream):
    client = marina.openai(MARINA_KEY)
    started = timezone.now() - timedelta(seconds=1)
    # Item 1: the ledger finds the draft owes the cancellation and retries (nudged-acted); verify
    # approves both runs; argcheck finds the stated order id (supported, no judge).
    play = Play(
        upstream, extract=extracted(CANCEL_OBLIGATION), main=[text("Noted."), calls(CANCEL_STATED)],
        review=APPROVE, judge=json_reply({"o1": "owed"}), retry=calls(CANCEL_STATED),
    )  # fmt: skip
    first = _ask(client, 1, OPENING_1)
    assert play.calls == ["extract", "main", "review", "judge", "retry", "review"]
    # Item 2: an invented order id: argcheck judges it unsupported and retries (nudged-changed);
    # then a plain text turn the ledger has nothing owed on.
    play.script(
        extract=extracted(CANCEL_OBLIGATION), main=calls(CANCEL_INVENTED), review=APPROVE,
        argjudge=json_reply({"supported": False, "doubt": "order_id"}), retry=text("Which order do you mean?"),
    )  # fmt: skip
    second = _ask(client, 2, OPENING_2)
    assert play.calls == ["extract", "main", "review", "argjudge", "retry", "review"]
    play.script(extract=extracted(), main=text("Anything else?"), review=APPROVE, judge=json_reply({"o1": "waiting"}))
    history = [*OPENING_2, {"role": "assistant", "content": "Which order do you mean?"}, {"role": "user", "content": "The one I said."}]
    third = _ask(client, 2, history)
    assert play.calls == ["extract", "main", "review", "judge"]
    assert first["x-marina-obligations"].endswith("nudges=1;extract=ok;check=nudged-acted")
    assert second["x-marina-argcheck"].endswith("nudges=1;check=nudged-changed")
    assert third["x-marina-obligations"].endswith("check=handled") and third["x-marina-argcheck"].endswith("check=no-write")

    items = [_item("1#0", 1, started, OPENING_1), _item("2#0", 2, started, OPENING_2)]
    plan = plan_links(items, models=[STACK], started=started, ended=timezone.now())
    one, two = plan.items["1#0"], plan.items["2#0"]
    assert (one.status, one.calls, two.status, two.calls) == ("linked", 1, "linked", 2)

    def header(h: dict[str, str], name: str) -> dict[str, str]:
        return decisions.read_header(h[f"x-marina-{name}"])

    assert one.decisions == {
        "obligations": {"nudged-acted": 1}, "argcheck": {header(first, "argcheck")["check"]: 1}, "verify": {"approved": 1},
    }  # fmt: skip
    assert one.counters["obligations"] == {"nudges": 1, **{k: int(header(first, "obligations")[k]) for k in ("open", "satisfied", "declined")}}
    assert one.counters["argcheck"] == {"nudges": 0, **{k: int(header(first, "argcheck")[k]) for k in ("writes", "checked", "flagged", "judged")}}
    assert two.decisions == {
        "obligations": {"tool-call": 1, "handled": 1}, "argcheck": {"nudged-changed": 1, "no-write": 1}, "verify": {"approved": 2},
    }  # fmt: skip
    # argcheck's counts add up over the item's calls; the obligations ledger is as the last call left it
    assert two.counters["argcheck"]["judged"] == int(header(second, "argcheck")["judged"]) + int(header(third, "argcheck")["judged"]) == 1
    assert two.counters["argcheck"]["nudges"] == 1
    assert two.counters["obligations"]["open"] == int(header(third, "obligations")["open"])


def test_a_stack_label_cut_at_64_characters_takes_verify_from_its_span():
    label = "obligations=nudged-unparsed;argcheck=judged-supported;verify=che"
    assert len(label) == 64
    spans = [
        ("obligations+argcheck+verify", {"obligations": "on;skipped=no-tools", "argcheck": "observe;writes=2;checked=3;flagged=1;judged=1;nudges=0;check=judged-supported"}),
        ("verify", {"label": "revised"}), ("verify", {"label": "checker-unavailable"}),
    ]  # fmt: skip
    call = decisions.of_trace("obligations+argcheck+verify", label, spans)
    assert call.labels == {"obligations": "no-tools", "argcheck": "judged-supported", "verify": "checker-unavailable"}
    item = decisions.ItemDecisions()
    item.add(call)
    item.add(call)
    assert item.counters == {"obligations": {"nudges": 0}, "argcheck": {"nudges": 0, "writes": 4, "checked": 6, "flagged": 2, "judged": 2}}
    # verify alone: the label is the trace's
    assert decisions.of_trace("verify", "held-write", []).labels == {"verify": "held-write"}
    assert decisions.of_trace("passthru", "", []).labels == {}


def test_patterns_fold_what_needed_no_judgement_and_read_old_stack_records():
    assert decisions.patterns({"obligations": {"tool-call": 5, "none-open": 2}, "argcheck": {"no-write": 3, "unsupported": 1}}) == {
        "obligations": "obligations: nothing judged", "argcheck": "argcheck: unsupported",
    }  # fmt: skip
    # as items linked before stacks were read apart stored them
    old = {"obligations+argcheck": {"obligations=handled;argcheck=no-write": 2, "obligations=nudged-acted;argcheck=no-write": 1}}
    assert decisions.normalize(old) == {"obligations": {"handled": 2, "nudged-acted": 1}, "argcheck": {"no-write": 3}}
    assert decisions.summary({"verify": {"approved": 3, "revised": 1}}, {}) == "verify: 3 approved, 1 revised"


@pytest.mark.django_db
def test_compare_breaks_the_difference_down_per_formation():
    a = make_run({"1#0": 0.0, "1#1": 1.0, "2#0": 1.0, "2#1": 0.0})
    b = make_run({"1#0": 1.0, "1#1": 1.0, "2#0": 0.0, "2#1": 1.0}, target=STACK)
    decided = {
        "1#0": {"obligations": {"nudged-acted": 1, "tool-call": 4}, "argcheck": {"no-write": 5}},
        "1#1": {"obligations": {"none-open": 3}, "argcheck": {"nudged-changed": 1, "no-write": 2}},
        "2#0": {"obligations": {"tool-call": 2}, "argcheck": {"no-write": 2}},
    }
    for item_id, d in decided.items():
        BenchmarkItem.objects.filter(run=b, item_id=item_id).update(decisions=d, link_status="linked")
    c = compare_runs(a, b, resamples=20)
    rows = {(r.side, r.decision): (r.items, r.successes, r.other_successes) for r in c.decisions}
    assert rows == {
        ("A", "none"): (4, 2, 3),
        ("B", "argcheck: nothing judged"): (2, 1, 1),
        ("B", "argcheck: nudged-changed"): (1, 1, 1),
        ("B", "argcheck: none"): (1, 1, 0),
        ("B", "obligations: nothing judged"): (2, 1, 2),
        ("B", "obligations: nudged-acted"): (1, 1, 0),
        ("B", "obligations: none"): (1, 1, 0),
    }
    # every formation's rows cover all shared items of its side
    for formation in ("argcheck", "obligations"):
        assert sum(n for (side, d), (n, _, _) in rows.items() if d.startswith(formation)) == 4
    assert "B obligations: nudged-acted: 1 item(s), pass 100.0%  other side on these items 0.0%  B - A +100.0%" in render_text(c)
    assert {r["decision"] for r in as_json(c)["decisions"]} == {d for _, d in rows}
