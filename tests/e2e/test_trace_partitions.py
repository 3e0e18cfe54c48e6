"""Migration 0015 on an existing PostgreSQL ledger, as an operator meets it:
`manage.py migrate` over a database at 0014 with traces of several days turns
ledger_trace and ledger_span into day-partitioned tables holding the same rows
(ids, index names, the identity sequence), `prune_traces` then drops a whole
day, and `trace_partitions` lists the days. With MARINA_TRACE_PARTITIONS=off
the tables stay plain until `trace_partitions --convert`."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.e2e.servers import Ledger, manage, postgres_database

pytestmark = pytest.mark.e2e

NOW = datetime.now(UTC)
# Two traces a day on three days, and one from long ago (more than 1,000 days: no partition of its own).
STARTS = [NOW - timedelta(days=d, hours=h) for d in (0, 1, 2) for h in (0, 1)] + [NOW - timedelta(days=2000)]


def _fill(ledger: Ledger) -> None:
    """Traces and two spans each, written as 0014's tables have them."""
    for n, at in enumerate(STARTS):
        ledger.rows(
            "INSERT INTO ledger_trace (request_id, client_request_id, started_at, duration_ms, method, path, key_name, "
            "requested_model, route, formation_label, session, stream, status, http_status, error_kind, "
            "error_message, prompt_tokens, completion_tokens, conv_opening, conv_system) VALUES "
            "(%s, '', %s, 10, 'POST', '/v1/chat/completions', 'team', 'm', 'passthru', '', '', false, 'ok', 200, "
            "'', '', 5, 7, '', '') RETURNING id",
            (f"req-{n}", at),
        )
    ledger.rows(
        "INSERT INTO ledger_span (trace_id, seq, name, provider, upstream_model, status, error_kind, started_at, "
        "duration_ms, prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens, cost_source, detail) "
        "SELECT t.id, s.seq, 'upstream', 'openrouter', 'm', 'ok', '', t.started_at, 5, 5, 7, 0, 0, 'none', '{}' "
        "FROM ledger_trace t, generate_series(1, 2) AS s(seq) RETURNING id"
    )


def _relkind(ledger: Ledger, table: str) -> str:
    return str(ledger.one("SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)", (table,)))


def _index_names(ledger: Ledger, table: str) -> set[str]:
    return {r[0] for r in ledger.rows("SELECT indexname FROM pg_indexes WHERE tablename = %s", (table,))}


def test_migrate_converts_an_existing_ledger_and_retention_drops_a_day() -> None:
    with postgres_database("marina_parts", migrate=("ledger", "0014")) as ledger:
        _fill(ledger)
        traces = ledger.rows("SELECT id, request_id, started_at FROM ledger_trace ORDER BY id")
        spans = ledger.rows("SELECT id, trace_id, seq FROM ledger_span ORDER BY id")
        indexes = {t: _index_names(ledger, t) for t in ("ledger_trace", "ledger_span")}
        assert _relkind(ledger, "ledger_trace") == "r"

        manage("migrate", "--no-input", "-v0", database_url=ledger.url)

        assert _relkind(ledger, "ledger_trace") == "p" and _relkind(ledger, "ledger_span") == "p"
        assert ledger.rows("SELECT id, request_id, started_at FROM ledger_trace ORDER BY id") == traces
        assert ledger.rows("SELECT id, trace_id, seq FROM ledger_span ORDER BY id") == spans
        assert ledger.one(
            "SELECT count(*) FROM ledger_span s JOIN ledger_trace t ON t.id = s.trace_id "
            "WHERE s.trace_started_at <> t.started_at"
        ) == 0
        for table, names in indexes.items():  # the same index names (the keys now hold the day too)
            assert names <= _index_names(ledger, table)
        homes = dict(ledger.rows("SELECT request_id, tableoid::regclass::text FROM ledger_trace"))
        assert homes["req-0"] == f"ledger_trace_p{STARTS[0]:%Y%m%d}"
        assert homes[f"req-{len(STARTS) - 1}"] == "ledger_trace_default"
        # Spans and links keep their trace_id column and its index, without a foreign key
        # (ledger/spend/partitions.py says why).
        assert ledger.one("SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND confrelid = 'ledger_trace'::regclass") == 0
        assert {"ledger_span_trace_id_ab65fc7d"} <= _index_names(ledger, "ledger_span")
        # The identity sequence goes on from the copied ids.
        next_id = ledger.one(
            "INSERT INTO ledger_trace (request_id, client_request_id, started_at, duration_ms, method, path, "
            "key_name, requested_model, route, formation_label, session, stream, status, http_status, error_kind, "
            "error_message, prompt_tokens, completion_tokens, conv_opening, conv_system) VALUES ('after', '', now(), "
            "1, 'POST', '/v1/x', '', '', '', '', '', false, 'ok', 200, '', '', 0, 0, '', '') RETURNING id"
        )
        assert next_id == max(t[0] for t in traces) + 1

        yesterday = (NOW - timedelta(days=1)).date()
        pruned = manage("prune_traces", "--before", f"{yesterday:%Y-%m-%d}", database_url=ledger.url)
        # The day before yesterday goes as tables; the ancient trace in DEFAULT row by row.
        assert "Deleted 3 traces and 6 spans" in pruned.stdout
        assert "(1 whole day(s) dropped as partitions) in 1 batch(es)" in pruned.stdout
        left = {r[0] for r in ledger.rows("SELECT request_id FROM ledger_trace")}
        assert left == {"req-0", "req-1", "req-2", "req-3", "after"}
        assert ledger.one("SELECT to_regclass(%s)::text", (f"ledger_trace_p{STARTS[4]:%Y%m%d}",)) is None

        listed = manage("trace_partitions", database_url=ledger.url).stdout.splitlines()
        assert listed[-1].startswith("DEFAULT") and any(line.startswith(f"{NOW:%Y-%m-%d}") for line in listed)
        assert not any(line.startswith(f"{STARTS[4]:%Y-%m-%d}") for line in listed)


def test_partitions_off_keeps_plain_tables_until_converted() -> None:
    off = {"MARINA_TRACE_PARTITIONS": "off"}
    with postgres_database("marina_parts", migrate=("ledger", "0014")) as ledger:
        _fill(ledger)
        manage("migrate", "--no-input", "-v0", database_url=ledger.url, env=off)
        assert _relkind(ledger, "ledger_trace") == "r"
        assert ledger.one(
            "SELECT count(*) FROM ledger_span s JOIN ledger_trace t ON t.id = s.trace_id "
            "WHERE s.trace_started_at = t.started_at"
        ) == 2 * len(STARTS)

        refused = manage("trace_partitions", database_url=ledger.url, check=False, env=off)
        assert refused.returncode == 1 and "trace_partitions --convert" in refused.stderr

        converted = manage("trace_partitions", "--convert", database_url=ledger.url, env=off)
        assert f"Converted {len(STARTS)} traces and {2 * len(STARTS)} spans" in converted.stdout
        assert _relkind(ledger, "ledger_trace") == "p" and _relkind(ledger, "ledger_span") == "p"
        again = manage("trace_partitions", "--convert", database_url=ledger.url)
        assert "nothing to convert" in again.stdout
