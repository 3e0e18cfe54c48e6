"""Marina seen from outside: Prometheus metrics (`metrics`, served at /metrics
by `views`), OpenTelemetry export of every committed trace (`otel`, loaded
only when an OTLP endpoint is configured), and the mapping of traces to
OpenTelemetry spans shared by the live export and `manage.py export_traces`
(`spans`, `export`). Everything is fed from the ledger writer after a trace
is committed (ledger.spend.services.WriterObserver), never from the request path."""
