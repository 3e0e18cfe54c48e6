"""The benchmark ledger: τ² results and ledger files imported as runs of items, summarised
and compared (statistics in stats.py)."""
