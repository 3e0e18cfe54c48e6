"""Overhead and throughput: the fake upstream directly, through Marina, and
through LiteLLM's proxy, under wrk, with a τ²-sized body.

    .venv/bin/python bench/overhead.py                 # the whole matrix, a few minutes
    .venv/bin/python bench/overhead.py --skip-litellm  # Marina and direct only
    .venv/bin/python bench/overhead.py --duration 3 --concurrency 1,32
    .venv/bin/python bench/overhead.py --skip-litellm --database postgres   # the ledger on PostgreSQL
    .venv/bin/python bench/overhead.py --database sqlite,postgres --runs 5  # issue 11's run: both, five times
    .venv/bin/python bench/overhead.py --skip-litellm --modes plain --concurrency 1 --runs 5

Marina targets (each its own model id, same server): `marina` a priced id
(openai/gpt-4.1-mini), `marina-unpriced` an id no price table knows (its
pricing miss remembered after the first call: passthru/pricing.py),
`marina-unprefixed` an id without a provider prefix (the fallback loop of
passthru/fallback.py, served by the first configured provider); with
`--ratelimit`, `marina-ratelimit`: a second server with the rate limiter on
(a bucket in the same kind of database, never exhausted). `--ids` picks them.

`--doors` adds the other /v1 doors beside chat, on the same server and in the
same run, each against the fake upstream on the path Marina calls
(`direct-<door>`, or `direct` for the translated door, which calls chat's):
`marina-responses` (native, openai), `marina-responses-translated` (a provider
without /responses: translated to chat and back), `marina-messages`
(anthropic) and `marina-embeddings` (plain only); their bodies are the
τ²-sized request in each door's shape (bench/door_bodies.py). The goal: no
door's added p50 at c=1 more than DOOR_GOAL_MS above chat's (`marina`).

Marina runs as in production: gunicorn with gunicorn.conf.py, 2 workers, the
ledger and traces on (SQLite in a temporary directory, the spend cap on).
LiteLLM's proxy is installed on first use into its own virtualenv
(~/.cache/marina/litellm-venv, version LITELLM_VERSION) and runs with 2
workers and no database. All three see the same fake upstream (bench/fake_upstream.py).

Printed per target, mode and concurrency: requests/s, p50/p99 latency, errors,
server CPU time per request (user+system of the whole process tree, from
/proc) and, at the end, resident memory per worker and Marina's ratios to
direct and to LiteLLM, all from the same run."""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import door_bodies
import tau2_body
from common import (
    LOOPBACK_ONLY_ENV,
    ROOT,
    Server,
    ensure_wrk,
    free_port,
    marina_env,
    migrate,
    scratch_postgres,
    start,
    start_fake_upstream,
)

BENCH = Path(__file__).resolve().parent
LITELLM_VERSION = os.environ.get("LITELLM_VERSION", "1.108.7")
LITELLM_VENV = Path(os.environ.get("LITELLM_VENV", Path.home() / ".cache/marina/litellm-venv"))
MARINA_KEY = "sk-marina-bench-key-0000"
LITELLM_KEY = "sk-litellm-bench-key-0000"
MODEL = "gpt-4.1-mini"
# The model id each Marina target sends (see the module's docstring).
MARINA_IDS = {
    "marina": f"openai/{MODEL}",
    "marina-unpriced": "openai/marina-bench-unpriced-model",
    "marina-unprefixed": MODEL,
    "marina-ratelimit": f"openai/{MODEL}",
}
# The other doors (--doors): target -> (path, model id, body builder, streams).
DOORS: dict[str, tuple[str, str, Any, bool]] = {
    "marina-responses": ("/v1/responses", f"openai/{MODEL}", door_bodies.responses_body, True),
    "marina-responses-translated": ("/v1/responses", f"groq/{MODEL}", door_bodies.responses_body, True),
    "marina-messages": ("/v1/messages", "anthropic/claude-sonnet-4-5", door_bodies.messages_body, True),
    "marina-embeddings": ("/v1/embeddings", "openai/text-embedding-3-small", lambda m, stream: door_bodies.embeddings_body(m), False),
}
# Doors Marina serves by calling the upstream's chat path (translated): their
# baseline is `direct`, the fake upstream on that path, since the fake
# upstream's own /v1/responses stream is shorter (~21.2 against ~22.4 ms) and
# would put the difference on Marina's bill.
CALLS_UPSTREAM_CHAT = {"marina-responses-translated"}
DOOR_GOAL_MS = 0.3
CHAT_PATH = "/v1/chat/completions"


def _door(target: str) -> tuple[str, str, Any, bool] | None:
    """The door of a Marina door target or of its direct baseline."""
    return DOORS.get(target) or DOORS.get(target.replace("direct-", "marina-", 1))


def path_of(target: str) -> str:
    door = _door(target)
    return door[0] if door else CHAT_PATH


def baseline_of(target: str) -> str:
    """The direct target a Marina target is measured against: the fake upstream
    on the path Marina calls (the door's own, or chat's for a translated door)."""
    if target in DOORS and target not in CALLS_UPSTREAM_CHAT:
        return target.replace("marina-", "direct-", 1)
    return "direct"


def is_baseline(target: str) -> bool:
    return target in BASELINES or target.startswith("direct-")


BASELINES = ("direct", "litellm")  # the targets Marina's are measured against
PG_ADMIN_URL = os.environ.get("MARINA_BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432")


@dataclass
class Result:
    target: str
    mode: str
    concurrency: int
    requests: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    cpu_ms_per_req: float
    upstream_cpu_ms_per_req: float
    run: int = 1


def ensure_litellm() -> Path:
    """The litellm CLI of its own virtualenv, created on first use."""
    exe = LITELLM_VENV / "bin" / "litellm"
    marker = LITELLM_VENV / f".installed-{LITELLM_VERSION}"
    if exe.exists() and marker.exists():
        return exe
    print(f"installing litellm[proxy]=={LITELLM_VERSION} into {LITELLM_VENV} (a few minutes, once) ...", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(LITELLM_VENV)], check=True)
    done = subprocess.run(
        [str(LITELLM_VENV / "bin" / "pip"), "install", "-q", f"litellm[proxy]=={LITELLM_VERSION}"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"installing litellm failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    marker.touch()
    return exe


def wrk(wrk_bin: str, url: str, body: Path, key: str, concurrency: int, seconds: float) -> dict[str, int]:
    threads = 1 if concurrency == 1 else 2
    cmd = [wrk_bin, f"-t{threads}", f"-c{concurrency}", f"-d{max(1, round(seconds))}s", "--timeout", "10s",
           "-s", str(BENCH / "wrk_post.lua"), url, "--", str(body), key]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("WRKJSON "))
    return json.loads(line[len("WRKJSON "):])


def measure(wrk_bin: str, target: str, server: Server | None, upstream: Server, url: str, body: Path, key: str,
            mode: str, concurrency: int, seconds: float) -> Result:
    cpu0 = server.cpu() if server else 0.0
    up0 = upstream.cpu()
    raw = wrk(wrk_bin, url, body, key, concurrency, seconds)
    cpu1 = server.cpu() if server else 0.0
    up1 = upstream.cpu()
    n = max(raw["requests"], 1)
    errors = raw["connect"] + raw["read"] + raw["write"] + raw["status"] + raw["timeout"]
    return Result(
        target=target,
        mode=mode,
        concurrency=concurrency,
        requests=raw["requests"],
        seconds=raw["duration_us"] / 1e6,
        rps=raw["requests"] / (raw["duration_us"] / 1e6),
        p50_ms=raw["p50_us"] / 1000,
        p99_ms=raw["p99_us"] / 1000,
        errors=errors,
        cpu_ms_per_req=(cpu1 - cpu0) * 1000 / n,
        upstream_cpu_ms_per_req=(up1 - up0) * 1000 / n,
    )


def write_bodies(tmp: Path) -> dict[tuple[str, str], Path]:
    bodies = {}
    for target, model in (("direct", MODEL), ("litellm", MODEL), *MARINA_IDS.items()):
        for mode in ("plain", "stream"):
            path = tmp / f"{target}-{mode}.json"
            path.write_bytes(tau2_body.encoded(model, stream=mode == "stream"))
            bodies[(target, mode)] = path
    for target, (_, model, build, _) in DOORS.items():
        for name, sent in ((target, model), (baseline_of(target), model.partition("/")[2])):
            if name == "direct":
                continue  # a translated door's baseline is chat's, with chat's body (above)
            for mode in ("plain", "stream"):
                path = tmp / f"{name}-{mode}.json"
                path.write_bytes(json.dumps(build(sent, stream=mode == "stream")).encode())
                bodies[(name, mode)] = path
    return bodies


def serves(target: str, mode: str) -> bool:
    """Embeddings have no stream."""
    door = _door(target)
    return mode == "plain" or door is None or door[3]


def start_litellm(tmp: Path, upstream_port: int) -> Server:
    exe = ensure_litellm()
    port = free_port()
    config = tmp / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{MODEL}\n"
        f"      api_base: http://127.0.0.1:{upstream_port}/v1\n"
        "      api_key: sk-fake-upstream-key\n"
        "general_settings:\n"
        f"  master_key: {LITELLM_KEY}\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL",)}
    env.update(LOOPBACK_ONLY_ENV)
    env.update({"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR", "PYTHONUNBUFFERED": "1"})
    return start(
        "litellm",
        [str(exe), "--config", str(config), "--host", "127.0.0.1", "--port", str(port), "--num_workers", "2"],
        env=env,
        base_url=f"http://127.0.0.1:{port}",
        ready_path="/health/liveliness",
        log_dir=tmp,
        timeout=180,
        cwd=tmp,
    )


def start_marina(tmp: Path, upstream_port: int, db_url: str, name: str = "marina",
                 extra: dict[str, str] | None = None, *, root: Path = ROOT) -> Server:
    port = free_port()
    env = marina_env(db_url=db_url, upstream_port=upstream_port, bind=f"127.0.0.1:{port}", key=MARINA_KEY, extra=extra)
    migrate(env, root)
    return start(
        name,
        [sys.executable, "-m", "gunicorn", "-c", str(root / "gunicorn.conf.py"), "marina.asgi:application"],
        env=env,
        base_url=f"http://127.0.0.1:{port}",
        ready_path="/v1/health",
        log_dir=tmp,
        cwd=root,
    )


def variant(spec: str) -> tuple[str, Path, dict[str, str]]:
    """`NAME[=DIR][,ENV=VALUE...]`: another Marina (from checkout DIR, with settings) measured alongside."""
    head, *pairs = spec.split(",")
    name, _, root = head.partition("=")
    return name, Path(root).resolve() if root else ROOT, dict(p.split("=", 1) for p in pairs)


def ledger_counts(db_url: str) -> tuple[int, dict[str, int], int]:
    """(traces, traces per status, spend_daily calls) in Marina's bench database,
    read in one snapshot: the servers still run, and the streams wrk cut off at
    the end of the last run are traced once Marina has drained them, so counts
    read one after another could each see a different ledger."""
    queries = ("select count(*) from ledger_trace",
               "select status || ' ' || error_kind, count(*) from ledger_trace group by 1",
               "select coalesce(sum(calls), 0) from spend_daily")
    if db_url.startswith("sqlite:///"):
        with sqlite3.connect(db_url[len("sqlite:///"):], isolation_level=None) as db:
            db.execute("begin")  # one read transaction: one snapshot of the log
            rows = [db.execute(q).fetchall() for q in queries]
            db.execute("commit")
    else:
        import psycopg

        with psycopg.connect(db_url) as db:
            db.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ  # one snapshot for the three
            rows = [db.execute(q).fetchall() for q in queries]  # type: ignore[arg-type]
    return rows[0][0][0], dict(rows[1]), int(rows[2][0][0])


# --- Time to first byte of streams: a lean asyncio client (wrk cannot tell) ---
async def _one_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> tuple[float, float]:
    """(seconds to the first SSE event, seconds to the end) of one streamed call on a kept-alive connection."""
    started = time.perf_counter()
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200") or b"chunked" not in head.lower():
        raise RuntimeError(f"unexpected answer: {head[:200]!r}")
    first = 0.0
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        data = await reader.readexactly(size + 2)
        if size == 0:
            return first, time.perf_counter() - started
        if not first and b"data:" in data:
            first = time.perf_counter() - started


async def _ttfb(port: int, request: bytes, concurrency: int, seconds: float) -> tuple[list[float], list[float]]:
    firsts: list[float] = []
    totals: list[float] = []
    stop = time.perf_counter() + seconds

    async def worker() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.perf_counter() < stop:
                first, total = await _one_stream(reader, writer, request)
                firsts.append(first)
                totals.append(total)
        finally:
            writer.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return firsts, totals


def ttfb(url: str, body: Path, key: str, concurrency: int, seconds: float) -> dict[str, float]:
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    data = body.read_bytes()
    auth = f"authorization: Bearer {key}\r\n".encode() if key else b""
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:%d\r\ncontent-type: application/json\r\n"
               b"%scontent-length: %d\r\n\r\n%s" % (port, auth, len(data), data))
    firsts, totals = asyncio.run(_ttfb(port, request, concurrency, seconds))
    q = statistics.quantiles(firsts, n=100) if len(firsts) > 1 else firsts * 99
    return {"n": len(firsts), "ttfb_p50_ms": statistics.median(firsts) * 1000, "ttfb_p99_ms": q[98] * 1000,
            "total_p50_ms": statistics.median(totals) * 1000}


def fmt_table(results: list[Result]) -> str:
    by = {(r.run, r.target, r.mode, r.concurrency): r for r in results}
    runs = max(r.run for r in results) > 1
    lines = [
        ("| run " if runs else "") + "| target | mode | c | req/s | p50 ms | p99 ms | added p50 ms | errors | server CPU ms/req |",
        ("| --- " if runs else "") + "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        d = by.get((r.run, baseline_of(r.target), r.mode, r.concurrency))
        direct_row = r.target == "direct" or r.target.startswith("direct-")
        added = f"{r.p50_ms - d.p50_ms:+.2f}" if d and not direct_row else ""
        cpu = f"{r.cpu_ms_per_req:.2f}" if not direct_row else f"(upstream {r.upstream_cpu_ms_per_req:.2f})"
        lines.append(
            (f"| {r.run} " if runs else "")
            + f"| {r.target} | {r.mode} | {r.concurrency} | {r.rps:.0f} | {r.p50_ms:.2f} | {r.p99_ms:.2f} | {added} | {r.errors} | {cpu} |"
        )
    return "\n".join(lines)


def fmt_runs(results: list[Result]) -> list[str]:
    """Added p50 at c=1 per run, and the median over the runs, per Marina target and mode."""
    lines = []
    for (target, mode, c), runs in same_run(results).items():
        added = [m.p50_ms - d.p50_ms for m, d, _ in runs if d]
        if c == 1 and not is_baseline(target) and added:
            lines.append(f"{target} {mode}: added p50 at c=1 per run {', '.join(f'{v:+.2f}' for v in added)} ms; "
                         f"median {statistics.median(added):+.2f} ms")
    return lines


def added_ttfb(rows: list[dict[str, Any]]) -> dict[tuple[str, int], list[float]]:
    """Added TTFB p50 per (target, c), one value per run (against direct in the same run)."""
    direct = {(r["run"], r["c"]): r for r in rows if r["target"] == "direct"}
    added: dict[tuple[str, int], list[float]] = {}
    for r in rows:
        d = direct.get((r["run"], r["c"]))
        if d and r["target"] != "direct":
            added.setdefault((r["target"], r["c"]), []).append(r["ttfb_p50_ms"] - d["ttfb_p50_ms"])
    return added


def fmt_ttfb(rows: list[dict[str, Any]]) -> str:
    direct = {(r["run"], r["c"]): r for r in rows if r["target"] == "direct"}
    lines = ["| run | target | c | streams | TTFB p50 ms | TTFB p99 ms | added TTFB p50 ms | whole stream p50 ms |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        d = direct.get((r["run"], r["c"]))
        added = f"{r['ttfb_p50_ms'] - d['ttfb_p50_ms']:+.2f}" if d and r["target"] != "direct" else ""
        lines.append(f"| {r['run']} | {r['target']} | {r['c']} | {r['n']} | {r['ttfb_p50_ms']:.2f} | {r['ttfb_p99_ms']:.2f} | "
                     f"{added} | {r['total_p50_ms']:.2f} |")
    for (target, c), values in added_ttfb(rows).items():
        lines.append(f"\n- {target} c={c}: added TTFB p50 per run {', '.join(f'{v:+.2f}' for v in values)} ms; "
                     f"median {statistics.median(values):+.2f} ms")
    return "\n".join(lines)


def same_run(results: list[Result]) -> dict[tuple[str, str, int], list[tuple[Result, Result | None, Result | None]]]:
    """Per (target, mode, c): each run's (result, direct, LiteLLM) of that same run."""
    by = {(r.run, r.target, r.mode, r.concurrency): r for r in results}
    out: dict[tuple[str, str, int], list[tuple[Result, Result | None, Result | None]]] = {}
    for r in results:
        direct = by.get((r.run, baseline_of(r.target), r.mode, r.concurrency))
        litellm = by.get((r.run, "litellm", r.mode, r.concurrency))
        out.setdefault((r.target, r.mode, r.concurrency), []).append((r, direct, litellm))
    return out


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def fmt_ratios(results: list[Result]) -> str:
    """Marina's figures against direct and LiteLLM, each ratio taken within a run; medians over the runs."""
    lines = [
        "| target | mode | c | Marina added p50 / p99 ms | Marina req/s ÷ direct | Marina req/s ÷ LiteLLM | LiteLLM CPU ÷ Marina CPU per req |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (target, mode, c), runs in same_run(results).items():
        if is_baseline(target):
            continue
        with_d = [(m, d) for m, d, _ in runs if d]
        with_l = [(m, lite) for m, _, lite in runs if lite]
        added = (f"{_median([m.p50_ms - d.p50_ms for m, d in with_d]):+.2f} / {_median([m.p99_ms - d.p99_ms for m, d in with_d]):+.2f}"
                 if with_d else "-")
        vs_direct = f"{_median([m.rps / d.rps for m, d in with_d]):.2f}" if with_d else "-"
        vs_l = f"{_median([m.rps / lite.rps for m, lite in with_l]):.1f}×" if with_l else "-"
        cpu = (f"{_median([lite.cpu_ms_per_req / m.cpu_ms_per_req for m, lite in with_l if m.cpu_ms_per_req]):.1f}×"
               if with_l else "-")
        lines.append(f"| {target} | {mode} | {c} | {added} | {vs_direct} | {vs_l} | {cpu} |")
    return "\n".join(lines)


# Goals per mode and ledger database, medians over the runs. Added p50 at c=1:
# plain calls as issue 45 asks (1.0 ms on SQLite, 1.5 on PostgreSQL), streams
# as issues 6 and 11 asked. At c >= 32, issue 45's for both databases: CPU per
# request at most 1/15 of LiteLLM's, and at least 10x its requests per second.
P50_GOAL_MS = {("plain", "sqlite"): 1.0, ("plain", "postgres"): 1.5, ("stream", "sqlite"): 2.0, ("stream", "postgres"): 2.5}
CPU_RATIO_GOAL = 15.0
THROUGHPUT_RATIO_GOAL = 10.0
TTFB_GOAL_MS = 1.0


def goals(results: list[Result], ttfb_rows: list[dict[str, Any]], rss: dict[str, list[float]],
          database_of: dict[str, str]) -> list[str]:
    """The goals for the priced id on each database ("marina", "marina-postgres")."""
    out = []

    def line(ok: bool, text: str) -> None:
        out.append(f"[{'PASS' if ok else 'MISS'}] {text}")

    runs = same_run(results)
    n = max((r.run for r in results), default=1)
    over = f"median of {n} runs" if n > 1 else "one run"
    first_byte = added_ttfb(ttfb_rows)
    for target, database in database_of.items():
        if target not in ("marina", f"marina-{database}"):
            continue
        for mode in ("plain", "stream"):
            pairs = [(m, d) for m, d, _ in runs.get((target, mode, 1), []) if d]
            if pairs:
                p50 = _median([m.p50_ms - d.p50_ms for m, d in pairs])
                p99 = _median([m.p99_ms - d.p99_ms for m, d in pairs])
                goal = P50_GOAL_MS[(mode, database)]
                line(p50 <= goal, f"added p50 at c=1 ({mode}, {database}) ≤ {goal:g} ms, {over}: {p50:+.2f} ms")
                line(p99 <= 10.0, f"added p99 at c=1 ({mode}, {database}) ≤ 10 ms, {over}: {p99:+.2f} ms")
        if first_byte.get((target, 1)):
            value = statistics.median(first_byte[(target, 1)])
            line(value <= TTFB_GOAL_MS, f"added time to first byte at c=1 ({database}) ≤ {TTFB_GOAL_MS:g} ms, {over}: {value:+.2f} ms")
        for (name, mode, c), per_run in runs.items():
            pairs_l = [(m, lite) for m, _, lite in per_run if lite and m.cpu_ms_per_req] if name == target else []
            if pairs_l and c >= 32:
                ratio = _median([lite.cpu_ms_per_req / m.cpu_ms_per_req for m, lite in pairs_l])
                line(ratio >= CPU_RATIO_GOAL, f"CPU/request ≤ 1/{CPU_RATIO_GOAL:g} of LiteLLM's, {mode} c={c} ({database}), {over}: "
                                              f"{_median([m.cpu_ms_per_req for m, _ in pairs_l]):.2f} vs "
                                              f"{_median([lite.cpu_ms_per_req for _, lite in pairs_l]):.2f} ms ({ratio:.1f}×)")
                rps = _median([m.rps / lite.rps for m, lite in pairs_l])
                line(rps >= THROUGHPUT_RATIO_GOAL, f"requests/s ≥ {THROUGHPUT_RATIO_GOAL:g}× LiteLLM's, {mode} c={c} ({database}), "
                                                   f"{over}: {_median([m.rps for m, _ in pairs_l]):.0f} vs "
                                                   f"{_median([lite.rps for _, lite in pairs_l]):.0f} ({rps:.1f}×)")
    for name, sizes in rss.items():
        if name.startswith("marina"):
            line(max(sizes) < 150, f"RSS per Marina worker < 150 MB ({name}): {', '.join(f'{v:.0f}' for v in sizes)} MB")
    for door in DOORS:
        for mode in ("plain", "stream"):
            door_runs = [(m, d) for m, d, _ in runs.get((door, mode, 1), []) if d]
            chat_runs = [(m, d) for m, d, _ in runs.get(("marina", mode, 1), []) if d]
            if door_runs and chat_runs:
                door_added = _median([m.p50_ms - d.p50_ms for m, d in door_runs])
                chat_added = _median([m.p50_ms - d.p50_ms for m, d in chat_runs])
                line(door_added - chat_added <= DOOR_GOAL_MS,
                     f"{door} added p50 at c=1 ({mode}) ≤ chat's + {DOOR_GOAL_MS:g} ms, {over}: "
                     f"{door_added:+.2f} vs {chat_added:+.2f} ms ({door_added - chat_added:+.2f})")
    errors = sum(r.errors for r in results if not is_baseline(r.target))
    line(errors == 0, f"zero errors through Marina: {errors}")
    return out


def databases(spec: str) -> list[str]:
    """--database: one or two of sqlite, postgres (the first is the main server's)."""
    names = [name.strip() for name in spec.split(",") if name.strip()]
    if not names or len(set(names)) != len(names) or any(name not in ("sqlite", "postgres") for name in names):
        raise argparse.ArgumentTypeError(f"expected sqlite, postgres or sqlite,postgres, not {spec!r}")
    return names


def measure_runs(
    args: argparse.Namespace, wrk_bin: str, targets: list[tuple[str, Server | None, str, str]], upstream: Server,
    bodies: dict[tuple[str, str], Path], modes: list[str], levels: list[int], ttfb_levels: list[int],
) -> tuple[list[Result], list[dict[str, Any]]]:
    """The measured matrix, args.runs times: each (mode, c) over every target, then the streams' TTFB."""
    results: list[Result] = []
    ttfb_rows: list[dict[str, Any]] = []
    # Targets interleave within each (mode, c), so that noise from the
    # shared machine falls on all of them alike; each run ends with the
    # streams' time to first byte, interleaved the same way.
    for run in range(1, args.runs + 1):
        for mode in modes:
            for c in levels:
                for name, server, url, key in targets:
                    if not serves(name, mode):
                        continue
                    r = measure(wrk_bin, name, server, upstream, f"{url}{path_of(name)}",
                                bodies[(name, mode)], key, mode, c, args.duration)
                    r.run = run
                    results.append(r)
                    print(f"  run {run} {name:18} {mode:6} c={c:<4} {r.rps:8.0f} req/s  p50 {r.p50_ms:7.2f} ms  "
                          f"p99 {r.p99_ms:7.2f} ms  errors {r.errors}  CPU {r.cpu_ms_per_req:6.2f} ms/req",
                          file=sys.stderr, flush=True)
        for c in ttfb_levels:
            for name, _, url, key in targets:
                if path_of(name) != CHAT_PATH:
                    continue  # time to first byte: chat's streams
                row = {"run": run, "target": name, "c": c, **ttfb(url, bodies[(name, "stream")], key, c, args.duration)}
                ttfb_rows.append(row)
                print(f"  run {run} ttfb {name:13} c={c:<4} p50 {row['ttfb_p50_ms']:7.2f} ms", file=sys.stderr, flush=True)
    return results, ttfb_rows


def report(
    args: argparse.Namespace, results: list[Result], ttfb_rows: list[dict[str, Any]], rss_idle: dict[str, Any],
    rss: dict[str, Any], counts: dict[str, Any], database_of: dict[str, str],
) -> None:
    """The Markdown report on stdout (and args.json)."""
    litellm_version = LITELLM_VERSION if not args.skip_litellm else "-"
    print(f"\n## Overhead and throughput ({os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the end; "
          f"{args.duration:g} s per run; body {len(tau2_body.encoded('openai/' + MODEL))} bytes; "
          f"ledger on {', '.join(args.database)}; LiteLLM {litellm_version})\n")
    print(fmt_table(results))
    if args.runs > 1:
        print("\n### Added p50 at c=1 over the runs\n")
        for line in fmt_runs(results):
            print(f"- {line}")
    if ttfb_rows:
        print("\n### Streams: time to first byte (first SSE event), keep-alive connections\n")
        print(fmt_ttfb(ttfb_rows))
    print("\n### Marina's ratios (same run)\n")
    print(fmt_ratios(results))
    print("\n### Memory (resident MB per worker)\n")
    for name in rss:
        print(f"- {name}: idle {', '.join(f'{v:.0f}' for v in rss_idle.get(name, []))}; "
              f"after load {', '.join(f'{v:.0f}' for v in rss[name])}")
    measured = sum(r.requests for r in results if r.target.startswith("marina"))
    print("\n### Ledger\n")
    for name, (traces, statuses, calls) in counts.items():
        print(f"- {name}: traced {traces} requests ({', '.join(f'{k.strip()}: {v}' for k, v in sorted(statuses.items()))}); "
              f"spend_daily counts {calls} calls")
    print(f"- wrk counted {measured} completed through Marina in the measured runs (plus warm-up and TTFB streams; "
          "`cancelled client_disconnected` are the streams wrk cut off when each run's time was up)")
    print("\n### Goals\n")
    for g in goals(results, ttfb_rows, rss, database_of):
        print(f"- {g}")
    if args.json:
        args.json.write_text(json.dumps({"results": [asdict(r) for r in results], "ttfb": ttfb_rows, "rss_mb": rss,
                                         "rss_idle_mb": rss_idle, "ledger": counts}, indent=2))


def marina_settings(args: argparse.Namespace, up_port: int) -> dict[str, str]:
    """--marina-env's settings; with --doors, anthropic and groq (no /responses: translated)
    pointed at the fake upstream too."""
    settings = dict(item.split("=", 1) for item in args.marina_env)
    if args.doors:
        for name in ("anthropic", "groq"):
            settings.setdefault(f"{name.upper()}_API_KEY", "sk-fake-upstream-key")
            settings.setdefault(f"MARINA_{name.upper()}_BASE_URL", f"http://127.0.0.1:{up_port}/v1")
    return settings


def servers_by_name(targets: list[tuple[str, Server | None, str, str]], marina: Server) -> dict[str, Server]:
    """Each Marina server once, by its first target's name (for its workers' memory)."""
    processes: dict[str, Server] = {"marina": marina}
    for name, server, _, _ in targets:
        if server is not None and server not in processes.values():
            processes[name] = server
    return processes


def warm(wrk_bin: str, targets: list[tuple[str, Server | None, str, str]], bodies: dict[Any, Any], modes: list[str]) -> None:
    """Warm every path (imports, connection pools, price tables) before measuring."""
    for name, _, url, key in targets:
        for mode in modes:
            if serves(name, mode):
                wrk(wrk_bin, f"{url}{path_of(name)}", bodies[(name, mode)], key, 8, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=6.0, help="seconds per wrk run (default 6)")
    parser.add_argument("--concurrency", default="1,32,128", help="comma list (default 1,32,128)")
    parser.add_argument("--modes", default="plain,stream")
    parser.add_argument("--skip-litellm", action="store_true", help="measure direct and Marina only")
    parser.add_argument("--ids", default="marina,marina-unpriced",
                        help="Marina targets (default marina,marina-unpriced; also marina-unprefixed)")
    parser.add_argument("--doors", action="store_true",
                        help="also the other doors (/v1/responses native and translated, /v1/messages, /v1/embeddings)")
    parser.add_argument("--ratelimit", action="store_true", help="also a Marina with the rate limiter on (marina-ratelimit)")
    parser.add_argument("--database", type=databases, default=["sqlite"],
                        help=f"Marina's ledger: sqlite (a temporary file), postgres (a throwaway database on {PG_ADMIN_URL}), "
                             "or both, 'sqlite,postgres': a Marina for each, measured interleaved; the second's targets "
                             "are named <id>-postgres")
    parser.add_argument("--runs", type=int, default=1, help="repeat the measured matrix, interleaved (median added p50 at c=1)")
    parser.add_argument("--ttfb", default="1,32", help="concurrency levels for streams' time to first byte ('' : none)")
    parser.add_argument("--gap-ms", type=float, default=1.0, help="fake upstream's pause between SSE events")
    parser.add_argument("--marina-env", action="append", default=[], metavar="NAME=VALUE",
                        help="a setting for Marina's servers (repeatable), e.g. MARINA_DAILY_SPEND_CAP_USD=off")
    parser.add_argument("--json", type=Path, help="also write the results here as JSON")
    parser.add_argument("--marina-variant", type=variant, action="append", default=[], metavar="NAME[=DIR][,ENV=V...]",
                        help="also measure another Marina (another checkout, other settings), interleaved; repeatable")
    args = parser.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    ttfb_levels = [int(c) for c in args.ttfb.split(",") if c]
    modes = args.modes.split(",")
    ids = [i for i in args.ids.split(",") if i] + (["marina-ratelimit"] if args.ratelimit else [])
    unknown = [i for i in ids if i not in MARINA_IDS]
    if unknown:
        raise SystemExit(f"unknown --ids {', '.join(unknown)}: use {', '.join(MARINA_IDS)}")
    wrk_bin = ensure_wrk()

    servers: list[Server] = []
    dbs: list[str] = []
    with tempfile.TemporaryDirectory(prefix="marina-bench-") as tmpdir, contextlib.ExitStack() as scratch:
        tmp = Path(tmpdir)
        try:
            bodies = write_bodies(tmp)
            upstream, up_port = start_fake_upstream(tmp, "--gap-ms", str(args.gap_ms))
            servers.append(upstream)

            main_db = args.database[0]

            def database(name: str, kind: str = main_db) -> str:
                if kind == "sqlite":
                    url = f"sqlite:///{tmp / (name + '.sqlite3')}"
                else:  # dropped when the bench ends
                    url = scratch.enter_context(scratch_postgres(PG_ADMIN_URL, f"marina_overhead_{name.replace('-', '_')}"))
                dbs.append(url)
                return url

            settings = marina_settings(args, up_port)
            marina = start_marina(tmp, up_port, database("marina"), extra=settings)
            servers.append(marina)
            by_id: dict[str, Server] = {i: marina for i in ids if i != "marina-ratelimit"}
            if args.ratelimit:
                by_id["marina-ratelimit"] = start_marina(
                    tmp, up_port, database("marina-ratelimit"), "marina-ratelimit",
                    {**settings, "MARINA_RATE_LIMIT_RPS": "1000000", "MARINA_RATE_LIMIT_BURST": "100000000"})
                servers.append(by_id["marina-ratelimit"])
            litellm = None if args.skip_litellm else start_litellm(tmp, up_port)
            if litellm:
                servers.append(litellm)
            targets: list[tuple[str, Server | None, str, str]] = [("direct", None, upstream.base_url, "")]
            targets += [(i, by_id[i], by_id[i].base_url, MARINA_KEY) for i in ids]
            if args.doors:
                for door in DOORS:
                    if baseline_of(door) != "direct":
                        targets.append((baseline_of(door), None, upstream.base_url, ""))
                    targets.append((door, marina, marina.base_url, MARINA_KEY))
            # The same ids through a Marina on each further database, interleaved with the first.
            database_of = {i: main_db for i in ids}
            for kind in args.database[1:]:
                other = start_marina(tmp, up_port, database(f"marina-{kind}", kind), f"marina-{kind}", settings)
                servers.append(other)
                for i in ids:
                    if i != "marina-ratelimit":
                        target = f"{i}-{kind}"
                        targets.append((target, other, other.base_url, MARINA_KEY))
                        bodies.update({(target, m): bodies[(i, m)] for m in ("plain", "stream")})
                        database_of[target] = kind
            if litellm:
                targets.append(("litellm", litellm, litellm.base_url, LITELLM_KEY))
            for name, root, extra in args.marina_variant:
                other = start_marina(tmp, up_port, database(name), name, {**settings, **extra}, root=root)
                servers.append(other)
                targets.append((name, other, other.base_url, MARINA_KEY))
                bodies.update({(name, m): bodies[("marina", m)] for m in ("plain", "stream")})
            processes = servers_by_name(targets, marina)
            rss_idle = {name: s.worker_rss() for name, s in processes.items()}
            warm(wrk_bin, targets, bodies, modes)

            results, ttfb_rows = measure_runs(args, wrk_bin, targets, upstream, bodies, modes, levels, ttfb_levels)
            rss = {name: s.worker_rss() for name, s in processes.items()}
            counts = {url.rsplit("/", 1)[1]: ledger_counts(url) for url in dbs}
        finally:
            for server in reversed(servers):
                server.stop()

    report(args, results, ttfb_rows, rss_idle, rss, counts, database_of)

if __name__ == "__main__":
    main()
