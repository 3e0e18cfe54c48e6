"""The τ² reproduction kit: `manage.py repro_tau2` (see docs/repro.md)."""
