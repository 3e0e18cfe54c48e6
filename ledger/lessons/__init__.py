"""Lessons: short general rules learned from failed benchmark simulations
(learning.py, with a judge model) and recalled at request time by lexical
ranking on the database's own full-text index (search.py). docs/lessons.md."""
