"""`marina/argcheck:<model>` (docs/formations.md): `formation` holds a write whose
arguments were never said; `values` finds the values in the conversation and the
call; `prompts` frames the judge and the nudge."""
