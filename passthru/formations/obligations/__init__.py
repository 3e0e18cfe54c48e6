"""`marina/obligations:<model>` (docs/formations.md): `formation` runs a turn
with the ledger of what the user asked for; `ledger` keeps and settles those
obligations across turns; `prompts` frames the extraction judge and the reminder."""
