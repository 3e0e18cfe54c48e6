"""The τ²-bench adapter: read an official results.json (streaming), turn it
into a ledger, judge its board comparability, and scrub its credentials."""
from __future__ import annotations

from ledger.benchmarks.board import Verdict, assess
from ledger.benchmarks.tau2.convert import to_ledger
from ledger.benchmarks.tau2.results import Simulation, Tau2Results, read_results

__all__ = ["Simulation", "Tau2Results", "Verdict", "assess", "read_results", "to_ledger"]
