"""Spend and traces: what passthru records after every /v1 request, and the reads of it."""
