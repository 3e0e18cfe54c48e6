"""The report pages and the admin at the scale of a team that runs τ² every day.

Fills a database with a realistic shape, then times every report page, every
admin changelist and change page, the spend CSV and the compare of two 10-run
groups, each `--repeat` times, in this process (Django's test client: the time
is the server's own, from the request to the last byte of the response). Beside
the wall-clock p50 and p95 it prints this process's CPU time (p50): on a busy
machine the wall time grows with the load, the CPU time much less.

At `--scale 1` (the PostgreSQL goal): 2,000,000 traces, 6,000,000 spans, 90 days
of spend_daily over 50 models and 20 keys, 1,000 runs with 400,000 items. SQLite
is measured at a tenth of that (`--scale 0.1`, its default).

    .venv/bin/python bench/reports_scale.py --database postgres            # marina_scale on 127.0.0.1:5432
    .venv/bin/python bench/reports_scale.py --database sqlite              # bench/.scale/marina-scale.sqlite3
    ... --database-url postgres://…/db   --refill   --repeat 20   --json out.json

The filled database is kept and reused by the next run (`--refill` makes it
anew). Goals: p95 ≤ 300 ms for every page, ≤ 1 s for the group compare (issue
45; issue 17 asked 2 s); the script prints the table and exits 1 above a goal.

Profiling the compare pages and the spend CSV needs only their shape, not 2M
traces: `--scale 0.05 --keys 20 --runs 1000` fills in ~30 s the 90,000
spend_daily rows, the 1,000 runs the compare page's pickers offer and the
10-run groups of 400 items (docs/performance.md).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PAGE_GOAL_MS = 300.0
COMPARE_GOAL_MS = 1000.0
DAYS = 90
MODELS = [f"openrouter/vendor{n % 7}/model-{n}" for n in range(50)]
KEYS = [f"team-{n}" for n in range(20)]
SPANS_PER_TRACE = 3
ITEMS_PER_RUN = 400
TRIALS = 4
RUNS_PER_GROUP = 10


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--database-url", help="default: postgres://postgres@127.0.0.1:5432/marina_scale, "
                        "or a SQLite file under bench/.scale/")
    parser.add_argument("--scale", type=float, help="1 = 2M traces (default 1 on PostgreSQL, 0.1 on SQLite)")
    parser.add_argument("--repeat", type=int, default=20, help="timed requests per page (default 20)")
    parser.add_argument("--keys", type=int, help="keys in spend_daily (default 20 x scale): --scale 0.05 --keys 20 "
                        "profiles the spend pages on the 2M fill's 90,000 rows in seconds")
    parser.add_argument("--runs", type=int, help="benchmark runs (default 1,000 x scale): --runs 1000 gives the compare "
                        "page's pickers the 2M fill's 500 runs each")
    parser.add_argument("--refill", action="store_true", help="drop what a previous run filled and fill again")
    parser.add_argument("--json", type=Path, help="also write the table here as JSON")
    parser.add_argument("--only", default="", help="time only the pages whose name contains one of these (comma-separated, e.g. frontier,trajector)")
    args = parser.parse_args()
    if args.scale is None:
        args.scale = 1.0 if args.database == "postgres" else 0.1
    if not args.database_url:
        if args.database == "postgres":
            args.database_url = "postgres://postgres@127.0.0.1:5432/marina_scale"
        else:
            (ROOT / "bench" / ".scale").mkdir(exist_ok=True)
            args.database_url = f"sqlite:///{ROOT / 'bench' / '.scale' / 'marina-scale.sqlite3'}"
    return args


def ensure_postgres_database(url: str) -> None:
    import psycopg
    from psycopg import sql

    base, _, name = url.rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def setup_django(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marina.settings")
    os.environ.setdefault("MARINA_ENV_FILE", os.devnull)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


# --- filling -------------------------------------------------------------------


class Writer:
    """Bulk rows into one table: COPY on PostgreSQL, executemany on SQLite.
    Columns a newer migration added and this script does not know get the
    model field's default, so the bench keeps working as the schema grows."""

    def __init__(self, model: Any, given: list[str]) -> None:
        from django.db import connection

        self.connection = connection
        self.table = model._meta.db_table
        fields = [f for f in model._meta.concrete_fields]
        self.columns = [f.column for f in fields]
        by_column = {f.column: f for f in fields}
        self.given = given
        self.extra = [c for c in self.columns if c not in given]
        self.extra_values = [self._default(by_column[c]) for c in self.extra]

    def _default(self, field: Any) -> Any:
        value = field.get_default()
        if isinstance(value, (dict, list)):
            return json.dumps(value)
        return value

    def write(self, rows: Iterator[tuple[Any, ...]]) -> int:
        columns = self.given + self.extra
        count = 0
        if self.connection.vendor == "postgresql":
            raw = self.connection.connection  # psycopg 3
            with raw.cursor() as cur:
                names = ", ".join(f'"{c}"' for c in columns)
                with cur.copy(f'COPY "{self.table}" ({names}) FROM STDIN') as copy:
                    for row in rows:
                        copy.write_row((*row, *self.extra_values))
                        count += 1
            raw.commit()
        else:
            placeholders = ", ".join("?" for _ in columns)
            names = ", ".join(f'"{c}"' for c in columns)
            statement = f'INSERT INTO "{self.table}" ({names}) VALUES ({placeholders})'
            raw = self.connection.connection
            batch: list[tuple[Any, ...]] = []
            for row in rows:
                batch.append((*row, *self.extra_values))
                if len(batch) == 20_000:
                    raw.executemany(statement, batch)
                    count += len(batch)
                    batch = []
            if batch:
                raw.executemany(statement, batch)
                count += len(batch)
            raw.commit()
        return count


def _json(value: Any) -> str:
    return json.dumps(value)


def _spend_rows(rng: random.Random, start: datetime, keys: list[str]) -> Iterator[tuple[Any, ...]]:
    """spend_daily: a row per day, model and key."""
    pk = 0
    for day in range(DAYS):
        d = (start + timedelta(days=day + 1)).date()
        for model in MODELS:
            for key in keys:
                pk += 1
                calls = rng.randint(1, 400)
                yield (pk, d, key, model, "openrouter", model.split("/", 1)[1], calls, calls // 50,
                       0, calls * 5000, calls * 200, calls * 1000, 0, calls * rng.randint(100_000, 9_000_000))


def _span_rows(start: datetime, n_traces: int, span_seconds: float) -> Iterator[tuple[Any, ...]]:
    """SPANS_PER_TRACE spans per trace, the first a verify draft holding its label."""
    pk = 0
    for trace in range(1, n_traces + 1):
        at = start + timedelta(seconds=trace * span_seconds)
        model = MODELS[trace % len(MODELS)]
        for seq in range(1, SPANS_PER_TRACE + 1):
            pk += 1
            yield (pk, trace, seq, None if seq == 1 else 1, "draft" if seq == 1 else "upstream", "openrouter",
                   model.split("/", 1)[1], "ok", 200, "", at, 300.0, 120.0, 1600, 70, 0, 0, 330_000, "provider",
                   _json({"label": "approved"} if seq == 1 else {}), at)


def fill(scale: float, *, now: datetime, n_keys: int | None = None, n_runs: int | None = None) -> dict[str, int]:
    from django.db import connection

    from ledger.models import BenchmarkItem, BenchmarkItemTrace, BenchmarkRun, Span, SpendDaily, Trace

    rng = random.Random(20261203)
    n_traces = int(2_000_000 * scale)
    n_runs = n_runs or max(2 * RUNS_PER_GROUP, int(1_000 * scale))
    if connection.vendor == "sqlite":
        connection.cursor().execute("PRAGMA synchronous=OFF")
    connection.ensure_connection()
    start = now - timedelta(days=DAYS)
    counts: dict[str, int] = {}

    keys = KEYS[: n_keys or max(1, round(len(KEYS) * scale))]

    counts["spend_daily"] = Writer(SpendDaily, [
        "id", "day", "key_name", "requested_model", "provider", "upstream_model", "calls", "errors",
        "unpriced_calls", "prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens",
        "cost_nanousd"]).write(_spend_rows(rng, start, keys))

    span_seconds = DAYS * 86400 / max(1, n_traces)
    # PostgreSQL: each day's partition made before its rows come (they would land in DEFAULT).
    from ledger.spend import partitions

    partitions.ensure_days(start.date() + timedelta(days=n) for n in range(DAYS + 2))

    def trace_rows() -> Iterator[tuple[Any, ...]]:
        for pk in range(1, n_traces + 1):
            at = start + timedelta(seconds=pk * span_seconds)
            model = MODELS[pk % len(MODELS)]
            failed = pk % 37 == 0
            yield (pk, f"req-{pk:012d}", at, 900.0 + pk % 700, 1.0 + (pk % 13) / 10, "POST", "/v1/chat/completions",
                   KEYS[pk % len(KEYS)], model, "passthru" if pk % 5 else "verify", "" if pk % 5 else "approved", "",
                   pk % 3 == 0, "error" if failed else "ok", 502 if failed else 200, "reset" if failed else "", "",
                   5000 + pk % 900, 200 + pk % 90, None if failed else 1_000_000 + pk % 5_000_000,
                   pk % 4000, f"{pk % 1000:016x}", f"{pk % 50:016x}")

    counts["traces"] = Writer(Trace, [
        "id", "request_id", "started_at", "duration_ms", "overhead_ms", "method", "path", "key_name",
        "requested_model", "route", "formation_label", "session", "stream", "status", "http_status", "error_kind",
        "error_message", "prompt_tokens", "completion_tokens", "cost_nanousd", "conv_seed", "conv_opening",
        "conv_system"]).write(trace_rows())

    counts["spans"] = Writer(Span, [
        "id", "trace_id", "seq", "parent_seq", "name", "provider", "upstream_model", "status", "http_status",
        "error_kind", "started_at", "duration_ms", "ttft_ms", "prompt_tokens", "completion_tokens", "cached_tokens",
        "reasoning_tokens", "cost_nanousd", "cost_source", "detail", "trace_started_at"]).write(
        _span_rows(start, n_traces, span_seconds)
    )

    rewards: dict[int, list[float]] = {}

    def run_rows() -> Iterator[tuple[Any, ...]]:
        for pk in range(1, n_runs + 1):
            quality = 0.35 + 0.3 * ((pk // RUNS_PER_GROUP) % 3) / 2
            rewards[pk] = [1.0 if rng.random() < quality else 0.0 for _ in range(ITEMS_PER_RUN)]
            mean = sum(rewards[pk]) / ITEMS_PER_RUN
            at = start + timedelta(hours=pk * (DAYS * 24 / n_runs))
            group = f"tau2-airline-arm{(pk - 1) // RUNS_PER_GROUP}"
            yield (pk, "tau2-airline", "airline", "model", MODELS[pk % len(MODELS)], group, f"run {pk}", pk, "base",
                   TRIALS, MODELS[pk % len(MODELS)], "gpt-4.1", _json({}), _json({}), "26.3", "",
                   f"{pk:064x}", f"results-{pk}.json", 25_000_000_000, "spend", ITEMS_PER_RUN, 0, 0, "complete",
                   "", "", True, _json([]), mean, _json([mean, mean * 0.8, mean * 0.7, mean * 0.6]), at,
                   at + timedelta(hours=1), at + timedelta(hours=1))

    counts["runs"] = Writer(BenchmarkRun, [
        "id", "benchmark", "domain", "target_kind", "target", "group", "label", "seed", "task_split", "num_trials",
        "agent_model", "user_model", "agent_args", "user_args", "tau2_version", "tau2_commit", "source_sha256",
        "source_name", "cost_nanousd", "cost_source", "simulations", "infra_errors", "skipped", "status",
        "invalid_reason", "judge", "comparable", "comparability_reasons", "mean_reward", "pass_hat_k",
        "started_at", "ended_at", "created_at"]).write(run_rows())

    linked_runs = set(range(max(1, n_runs - 10), n_runs + 1))  # the newest runs are linked to traces

    def item_rows() -> Iterator[tuple[Any, ...]]:
        pk = 0
        for run in range(1, n_runs + 1):
            for n in range(ITEMS_PER_RUN):
                pk += 1
                task, trial = n // TRIALS, n % TRIALS
                reward = rewards[run][n]
                linked = run in linked_runs
                yield (pk, run, f"{task}#{trial}", str(task), trial, reward, reward == 1.0, False, False,
                       "user_stop", 120.0, 0.05, 0.01, _json({"DB": reward}), trial, "", "",
                       "linked" if linked else "", 3 if linked else 0, 0, 0, 15000 if linked else 0,
                       600 if linked else 0, 3_000_000 if linked else None,
                       _json({"verify": {"approved": 2, "revised": 1}} if linked else {}))

    counts["items"] = Writer(BenchmarkItem, [
        "id", "run_id", "item_id", "task_id", "trial", "reward", "correct", "infra_error", "skipped",
        "termination_reason", "duration_s", "agent_cost_usd", "user_cost_usd", "reward_breakdown", "seed",
        "opening_agent", "opening_user", "link_status", "trace_calls", "trace_errors", "trace_unpriced",
        "trace_prompt_tokens", "trace_completion_tokens", "trace_cost_nanousd", "decisions"]).write(item_rows())

    first_linked_item = (min(linked_runs) - 1) * ITEMS_PER_RUN + 1

    def link_rows() -> Iterator[tuple[Any, ...]]:
        pk = 0
        trace = n_traces
        for item in range(first_linked_item, n_runs * ITEMS_PER_RUN + 1):
            for role in ("agent", "agent", "user"):
                pk += 1
                yield (pk, item, trace, role)
                trace -= 1

    counts["item_trace_links"] = Writer(BenchmarkItemTrace, ["id", "item_id", "trace_id", "role"]).write(link_rows())

    _analyze(connection)
    return counts


def _analyze(connection: Any) -> None:
    """Sequences past the ids written by hand (PostgreSQL), fresh planner statistics and
    (VACUUM) the visibility map autovacuum gives an append-only table soon after it is
    written, without which an index-only scan reads the table after all."""
    from ledger.models import BenchmarkItem, BenchmarkItemTrace, BenchmarkRun, Span, SpendDaily, Trace

    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            for model in (SpendDaily, Trace, Span, BenchmarkRun, BenchmarkItem, BenchmarkItemTrace):
                table = model._meta.db_table
                cur.execute(f"SELECT setval(pg_get_serial_sequence('\"{table}\"', 'id'), "
                            f"(SELECT COALESCE(MAX(id), 1) FROM \"{table}\"))")
                cur.execute(f'VACUUM (ANALYZE) "{table}"')
    else:
        connection.cursor().execute("ANALYZE")


def empty_tables() -> None:
    from django.db import connection

    from ledger.models import BenchmarkItem, BenchmarkItemTrace, BenchmarkRun, Span, SpendDaily, Trace

    tables = [m._meta.db_table for m in (BenchmarkItemTrace, BenchmarkItem, BenchmarkRun, Span, Trace, SpendDaily)]
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("TRUNCATE " + ", ".join(f'"{t}"' for t in tables) + " CASCADE")
        else:
            for table in tables:
                cur.execute(f'DELETE FROM "{table}"')


# --- timing --------------------------------------------------------------------


def pages() -> list[tuple[str, str, float]]:
    """(name, path, goal in ms) of every page to time."""
    from django.contrib import admin
    from django.urls import reverse

    from ledger.models import BenchmarkItem, BenchmarkRun, Trace

    newest = BenchmarkRun.objects.order_by("-id").values_list("id", flat=True)[:2]
    run_a, run_b = list(newest)[1], list(newest)[0]
    groups = sorted(BenchmarkRun.objects.order_by().values_list("group", flat=True).distinct())[:2]
    trace = Trace.objects.order_by("-id").values_list("id", flat=True).first()
    task = BenchmarkItem.objects.filter(run_id=run_b).order_by("pk").values_list("task_id", flat=True).first()
    found: list[tuple[str, str, float]] = [
        ("overview", "/reports/", PAGE_GOAL_MS),
        ("runs", "/reports/runs/", PAGE_GOAL_MS),
        ("runs?group", f"/reports/runs/?group={groups[0]}", PAGE_GOAL_MS),
        ("run (linked)", f"/reports/runs/{run_b}/", PAGE_GOAL_MS),
        ("compare runs", f"/reports/compare/?mode=runs&run_a={run_a}&run_b={run_b}", PAGE_GOAL_MS),
        ("compare 10-run groups", f"/reports/compare/?mode=groups&group_a={groups[0]}&group_b={groups[1]}",
         COMPARE_GOAL_MS),
        ("spend (14 days)", "/reports/spend/", PAGE_GOAL_MS),
        ("spend (90 days)", f"/reports/spend/?since={(date.today() - timedelta(days=89)).isoformat()}", PAGE_GOAL_MS),
        ("spend.csv (90 days)", f"/reports/spend.csv?since={(date.today() - timedelta(days=89)).isoformat()}",
         PAGE_GOAL_MS),
        ("traces", "/reports/traces/", PAGE_GOAL_MS),
        ("traces?model", f"/reports/traces/?model={MODELS[7]}", PAGE_GOAL_MS),
        ("traces?status=error", "/reports/traces/?status=error", PAGE_GOAL_MS),
        ("trace", f"/reports/traces/{trace}/", PAGE_GOAL_MS),
        # What an arm did: the newest 100 runs (or groups) as points; two linked runs' trajectories of a task.
        ("frontier", "/reports/frontier/", PAGE_GOAL_MS),
        ("frontier by group, pass^2", "/reports/frontier/?by=group&k=2", PAGE_GOAL_MS),
        ("api frontier", "/api/frontier", PAGE_GOAL_MS),
        ("trajectories (linked)", f"/reports/trajectories/?a={run_a}&b={run_b}&task={task}", PAGE_GOAL_MS),
        ("api trajectories", f"/api/trajectories?a={run_a}&b={run_b}&task={task}", PAGE_GOAL_MS),
        ("admin index", "/admin/", PAGE_GOAL_MS),
    ]
    for model, model_admin in admin.site._registry.items():
        meta = model._meta
        name = f"{meta.app_label}.{meta.model_name}"
        changelist = reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist")
        found.append((f"admin {name} list", changelist, PAGE_GOAL_MS))
        if model_admin.search_fields:
            found.append((f"admin {name} search", f"{changelist}?q=model-7", PAGE_GOAL_MS))
        last = model._default_manager.order_by("-pk").values_list("pk", flat=True).first()
        if last is not None:
            change = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[last])
            found.append((f"admin {name} change", change, PAGE_GOAL_MS))
    return found


def time_pages(repeat: int, only: str = "") -> list[dict[str, Any]]:
    from django.contrib.auth import get_user_model
    from django.db import connection, reset_queries
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    user, _ = get_user_model().objects.get_or_create(
        username="scale-bench", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(user)
    table = []
    for name, path, goal in pages():
        if only and not any(part in name for part in only.split(",")):
            continue
        times = []
        cpu = []  # this process's CPU time (Django, the template, the driver): less noisy than wall on a busy machine
        queries = 0
        status = 0
        for n in range(repeat + 1):  # the first is a warm-up, not counted
            reset_queries()
            with CaptureQueriesContext(connection) as captured:
                began, began_cpu = time.perf_counter(), time.process_time()
                response = client.get(path)
                if getattr(response, "streaming", False):
                    b"".join(response.streaming_content)  # type: ignore[arg-type]
                else:
                    _ = response.content
                elapsed = (time.perf_counter() - began) * 1000
                elapsed_cpu = (time.process_time() - began_cpu) * 1000
            status = response.status_code
            queries = len(captured.captured_queries)
            if n:
                times.append(elapsed)
                cpu.append(elapsed_cpu)
        times.sort()
        p95 = times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))]
        table.append({
            "page": name, "path": path, "status": status, "queries": queries,
            "p50_ms": round(statistics.median(times), 1), "p95_ms": round(p95, 1), "goal_ms": goal,
            "cpu_p50_ms": round(statistics.median(cpu), 1),
            "ok": status == 200 and p95 <= goal,
        })
        mark = "" if table[-1]["ok"] else "   <-- over goal" if status == 200 else f"   <-- HTTP {status}"
        print(f"{name:38} {status:>4} {queries:>4} q  p50 {table[-1]['p50_ms']:>8.1f}  p95 {p95:>8.1f} ms"
              f"  (cpu p50 {table[-1]['cpu_p50_ms']:>7.1f}){mark}",
              flush=True)
    return table


def main() -> int:
    args = parse_args()
    if args.database == "postgres":
        ensure_postgres_database(args.database_url)
    setup_django(args.database_url)
    from ledger.models import Trace

    now = datetime.now(UTC)
    if args.refill:
        empty_tables()
    if not Trace.objects.exists():
        began = time.monotonic()
        counts = fill(args.scale, now=now, n_keys=args.keys, n_runs=args.runs)
        print(f"filled in {time.monotonic() - began:.0f} s: " + ", ".join(f"{v:,} {k}" for k, v in counts.items()),
              flush=True)
    from django.db import connection

    print(f"\n{connection.vendor}, scale {args.scale}: {Trace.objects.order_by('-id').values_list('id', flat=True)[0]:,}"
          f" traces; {args.repeat} timed requests per page (server time, in process)\n", flush=True)
    table = time_pages(args.repeat, args.only)
    if args.json:
        args.json.write_text(json.dumps({"database": connection.vendor, "scale": args.scale, "pages": table},
                                        indent=2))
    over = [row["page"] for row in table if not row["ok"]]
    print(f"\n{len(table) - len(over)} of {len(table)} pages within their goal" + (f"; over: {', '.join(over)}" if over else ""))
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
