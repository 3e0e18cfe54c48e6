"""Regenerate ledger/demo_data/ (what `manage.py demo` loads) from the τ² fixtures.

A developer tool, run by hand, reading tests/fixtures/tau2 (the server and
`manage.py demo` read only ledger/demo_data/). It converts the fixtures to Marina's ledger format (no
conversations, no credentials: the converter strips them), renames the oracle
models to the demo's model ids, and derives a second arm from each airline run
(a seeded share of its failures turned into passes, a few passes into
failures) so the two demo groups differ the way two real arms would.

    .venv/bin/python scripts/make_demo_data.py
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marina.settings")

import django  # noqa: E402

django.setup()

from ledger.benchmarks.credentials import credential_paths  # noqa: E402
from ledger.benchmarks.importers import load_tau2  # noqa: E402
from ledger.benchmarks.ledgerfile import Ledger, write_ledger  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "tau2"
OUT = ROOT / "ledger" / "demo_data"
BASE_MODEL = "demo/alpha-large"
VERIFY_MODEL = f"marina/verify:{BASE_MODEL}"
USER_MODEL = "demo/alpha-mini"
# (fixture, output name, derive a verify arm)
SOURCES = [
    ("airline-oracle", "airline-1", True),
    ("airline-skipped-samples", "airline-2", True),
    ("airline-infra-errors", "airline-3", True),
    ("retail-oracle", "retail-1", False),
]


def _rename(ledger: Ledger, agent_model: str) -> None:
    for side, model in (("agent", agent_model), ("user", USER_MODEL)):
        participant = getattr(ledger.run, side)
        participant.model = model
        participant.llm = f"openai/{model}"
        # The fixture's loopback api_base means nothing on another machine.
        participant.args = {k: v for k, v in participant.args.items() if k != "api_base"}


def _source(ledger: Ledger, name: str) -> None:
    ledger.source = {
        "kind": "marina-demo",
        "name": f"demo/{name}.ledger.json",
        # Keyed by the demo's own name, never the fixture's hash: importing the
        # real fixture next to the demo stays possible.
        "sha256": hashlib.sha256(f"marina-demo:{name}".encode()).hexdigest(),
    }


def _verify_arm(ledger: Ledger, seed: int) -> None:
    rng = random.Random(seed)
    for item in ledger.items:
        if item.infra_error or item.reward is None:
            continue
        if item.reward < 1 and rng.random() < 0.6:
            item.reward, item.termination_reason, item.skipped = 1.0, "user_stop", False
            item.reward_breakdown = {k: 1.0 for k in item.reward_breakdown} or {"DB": 1.0}
        elif item.reward >= 1 and rng.random() < 0.06:
            item.reward = 0.0
            item.reward_breakdown = {k: 0.0 for k in item.reward_breakdown} or {"DB": 0.0}
        if item.duration_s is not None:
            item.duration_s = round(item.duration_s * 1.6, 3)  # three calls per turn instead of one


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for seed, (fixture, name, derive) in enumerate(SOURCES):
        base = load_tau2(FIXTURES / f"{fixture}.results.json")
        _rename(base, BASE_MODEL)
        _source(base, name)
        write_ledger(base, OUT / f"{name}.ledger.json")
        if derive:
            arm = load_tau2(FIXTURES / f"{fixture}.results.json")
            _rename(arm, VERIFY_MODEL)
            _verify_arm(arm, seed)
            _source(arm, f"{name}-verify")
            write_ledger(arm, OUT / f"{name}-verify.ledger.json")
    for path in sorted(OUT.glob("*.ledger.json")):
        data = json.loads(path.read_text())
        leaks = list(credential_paths(data))
        assert not leaks and "sk-" not in path.read_text(), f"{path}: credentials left at {leaks}"
        print(f"{path.relative_to(ROOT)}: {path.stat().st_size:,} bytes, pass^k {data['summary']['pass_hat_k']}")


if __name__ == "__main__":
    main()
