"""`marina/verify:<proposer>[+<checker>]` (docs/formations.md): `formation` runs the
draft, review and revision rounds; `prompts` frames the checker's view; `verdict`
reads its answer; `guard` keeps a revision from undoing what the draft got right."""
