"""Primitives every app may import and that import none of them: money (nano-dollars),
redaction of secrets, conversation identity, typed environment settings, the
registry of formations, and the database plumbing that needs only Django (the
database threads, the writer thread and SQLite's write turn, prepared
statements, the raw cursor, SQLite's checkpoints).

The layers, top to bottom (docs/architecture.md; tests/test_layers.py checks them):
marina (the project) > repro > passthru, observability > ledger > kernel."""
