"""Primitives every app may import and that import none of them: money (nano-dollars),
redaction of secrets, conversation identity, typed environment settings.

The layers, top to bottom (docs/architecture.md; tests/test_layers.py checks them):
marina (the project) > repro > passthru, observability > ledger > kernel."""
