"""A real Prometheus (Debian's package) scrapes a two-worker gunicorn: every
worker's requests are counted, the series agree with the ledger, a killed
worker's counts survive, and `promtool check metrics` finds no problem.

The test starts its own Prometheus on a free loopback port with its
configuration and storage in a temporary folder (scripts/test installs the
package)."""
from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from tests.conftest import MARINA_KEY
from tests.e2e.load import cost_nanousd, priced_handler, run_load, summary
from tests.e2e.servers import free_port

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs Debian's prometheus package (scripts/test installs it)"),
]

TOKEN = "metrics-token-for-the-test-4242"
REQUESTS = 60


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


class Prometheus:
    def __init__(self, folder: Path, target_port: int) -> None:
        self.port = free_port()
        config = folder / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n"
            "  - job_name: marina\n"
            "    metrics_path: /metrics\n"
            f"    authorization:\n      credentials: {TOKEN}\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n"
        )
        self.log = folder / "prometheus.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    "prometheus",
                    f"--config.file={config}",
                    f"--storage.tsdb.path={folder / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(self.ready, "Prometheus to start")

    def ready(self) -> bool:
        assert self.proc.poll() is None, self.log.read_text()[-3000:]
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/-/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def query(self, expr: str) -> float | None:
        reply = httpx.get(f"http://127.0.0.1:{self.port}/api/v1/query", params={"query": expr}, timeout=10).json()
        assert reply["status"] == "success", reply
        result = reply["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def metrics_dir(tmp_path: Path) -> Path:
    return tmp_path / "metrics"


def per_worker_requests(folder: Path) -> dict[int, float]:
    """marina_requests_total as each worker's own sample file holds it."""
    counts: dict[int, float] = {}
    for path in folder.glob("counter_*.db"):
        alone = path.parent.parent / f"one-{path.stem}"
        alone.mkdir(exist_ok=True)
        shutil.copy(path, alone / path.name)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(alone))
        total = sum(
            s.value for m in registry.collect() for s in m.samples if s.name == "marina_requests_total"
        )
        counts[int(path.stem.split("_")[1])] = total
    return counts


@pytest.fixture
def prometheus_for(tmp_path: Path) -> Iterator[Callable[[int], Prometheus]]:
    started: list[Prometheus] = []

    def start(port: int) -> Prometheus:
        folder = tmp_path / "prometheus"
        folder.mkdir()
        started.append(Prometheus(folder, port))
        return started[-1]

    yield start
    for p in started:
        p.stop()


def test_prometheus_scrapes_every_worker_and_agrees_with_the_ledger(servers, upstream, metrics_dir, prometheus_for):
    upstream.handler = priced_handler()
    # reuse_port: each worker its own listening socket, the kernel spreading new
    # connections by hash. With the shared socket an idle machine lets one worker
    # accept all 16 connections (seen in CI), and this test is about summing workers.
    server = servers.start(
        workers=2, PROMETHEUS_MULTIPROC_DIR=str(metrics_dir), MARINA_METRICS_TOKEN=TOKEN, MARINA_REUSE_PORT="true"
    )
    prometheus = prometheus_for(server.port)

    # Enough concurrent connections that both workers answer some (checked below).
    outcomes = asyncio.run(
        run_load([server.base_url], MARINA_KEY, concurrency=16, requests=REQUESTS, kinds=("plain", "stream"))
    )
    assert all(o.ok for o in outcomes), summary(outcomes)
    ledger = server.ledger
    assert ledger is not None
    assert ledger.totals()["traces"] == REQUESTS

    by_worker = per_worker_requests(metrics_dir)
    assert sum(by_worker.values()) == REQUESTS
    assert len([n for n in by_worker.values() if n > 0]) == 2, by_worker

    # The token is required from here on (the scrape config sends it).
    assert httpx.get(f"{server.base_url}/metrics").status_code == 401
    scraped = httpx.get(f"{server.base_url}/metrics", headers={"authorization": f"Bearer {TOKEN}"})
    assert scraped.status_code == 200
    lint = subprocess.run(["promtool", "check", "metrics"], input=scraped.content, capture_output=True, timeout=60)
    assert lint.returncode == 0, lint.stdout + lint.stderr

    wait_for(lambda: prometheus.query("sum(marina_requests_total)") == REQUESTS, "Prometheus to see every request")
    assert prometheus.query('up{job="marina"}') == 1
    ok = 'sum(marina_requests_total{model="openrouter/openai/gpt-5.2",provider="openrouter",status="ok",code="200"})'
    assert prometheus.query(ok) == REQUESTS
    assert prometheus.query("sum(marina_upstream_duration_seconds_count)") == REQUESTS
    assert prometheus.query('sum(marina_overhead_seconds_count{route="passthru"})') == REQUESTS
    expected_usd = sum(cost_nanousd(i) for i in range(REQUESTS)) / 1e9
    assert prometheus.query("sum(marina_cost_usd_total)") == pytest.approx(expected_usd, rel=1e-9)
    assert prometheus.query("sum(marina_cost_usd_total)") == pytest.approx(ledger.totals()["spend_cost"] / 1e9, rel=1e-9)
    prompt = ledger.one("SELECT SUM(prompt_tokens) FROM spend_daily")
    assert prometheus.query('sum(marina_tokens_total{kind="prompt"})') == prompt
    assert prometheus.query("marina_spend_today_usd") == pytest.approx(expected_usd, rel=1e-9)
    assert prometheus.query("sum(marina_ledger_queue_depth)") == 0
    assert prometheus.query("sum(marina_ledger_write_seconds_count)") >= 1

    # A worker killed outright: gunicorn starts another, and the dead one's counts stay.
    victim = max(by_worker, key=lambda pid: by_worker[pid])
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: len(server.worker_pids()) == 2 and victim not in server.worker_pids(), "the worker to be replaced")
    more = asyncio.run(run_load([server.base_url], MARINA_KEY, concurrency=4, requests=10, kinds=("plain",)))
    assert all(o.ok for o in more), summary(more)
    wait_for(lambda: prometheus.query("sum(marina_requests_total)") == REQUESTS + 10, "the count after the restart")
    # The dead worker's live gauge was removed (child_exit), its counters kept.
    assert not list(metrics_dir.glob(f"gauge_livesum_{victim}.db"))
    assert (metrics_dir / f"counter_{victim}.db").exists()


def test_a_count_of_trusted_proxies_does_not_open_metrics_to_a_forwarded_client(servers):
    """Issue 42 E1, through gunicorn: MARINA_TRUSTED_PROXIES=1 with the proxy on
    this host (the peer is 127.0.0.1): a forwarded outside client gets 403, a
    scrape from this host without a proxy still 200."""
    server = servers.start(MARINA_TRUSTED_PROXIES="1")
    outside = httpx.get(f"{server.base_url}/metrics", headers={"x-forwarded-for": "203.0.113.9"}, timeout=10)
    assert outside.status_code == 403 and "marina_" not in outside.text
    assert httpx.get(f"{server.base_url}/metrics", timeout=10).status_code == 200
