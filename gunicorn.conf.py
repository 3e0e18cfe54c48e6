"""gunicorn settings for Marina (ASGI workers). Every value can be set from
the environment or from .env; see .env.example."""
from __future__ import annotations

import os
import runpy
import shutil
import tempfile
from pathlib import Path
from typing import Any

from marina.env import ConfigError, env_int, env_str, load_env_file

# Blank means the default here too (.env.example), and a malformed value stops
# start-up with one line naming it: gunicorn prints a config file's exception
# as a traceback, so this file exits with the line itself.
try:
    load_env_file(Path(__file__).resolve().parent / ".env")  # as marina/settings.py does; read here for MARINA_BIND & co.
    bind = env_str("MARINA_BIND") or "127.0.0.1:3300"
    workers = env_int("MARINA_WORKERS", env_int("WEB_CONCURRENCY", 2, minimum=1), minimum=1)
    # Reasoning models can think for minutes before the first byte; the worker
    # timeout is a heartbeat (async workers keep beating while they wait), and
    # graceful_timeout is how long SIGTERM lets in-flight calls run to the end.
    timeout = env_int("MARINA_WORKER_TIMEOUT", 900)
    graceful_timeout = env_int("MARINA_GRACEFUL_TIMEOUT", 660)
except ConfigError as exc:
    raise SystemExit(f"Error: Marina's configuration: {exc}") from None
worker_class = "marina.worker.MarinaWorker"  # uvicorn + uvloop + httptools (marina/worker.py)
keepalive = 75  # above typical client/LB idle timeouts, so pooled connections survive
accesslog = env_str("MARINA_ACCESS_LOG") or None  # off by default: traces hold per-request data
errorlog = "-"
loglevel = (env_str("MARINA_LOG_LEVEL") or "info").lower()
# gunicorn >= 25 opens a control socket at one fixed path per user: two
# servers on one host (scale-out, a test beside a dev server) would take it
# from each other. Off unless MARINA_CONTROL_SOCKET names a path for this one.
control_socket = os.environ.get("MARINA_CONTROL_SOCKET") or "gunicorn.ctl"
control_socket_disable = not os.environ.get("MARINA_CONTROL_SOCKET")


def on_starting(server: Any) -> None:
    """Read Marina's settings once in the master, before any worker: a malformed
    variable stops the server with one line naming it (gunicorn prints a
    RuntimeError as `Error: ...` and exits 1), not a traceback per worker."""
    try:
        runpy.run_path(str(Path(__file__).resolve().parent / "marina" / "settings.py"))
    except ConfigError as exc:
        raise RuntimeError(f"Marina's configuration: {exc}") from None


# Prometheus metrics (observability/metrics.py): every worker writes its
# samples to files in one folder, and a scrape of any worker sums them all.
# The variable must be set before a worker imports prometheus-client, so it is
# set here, in the master. A folder given in PROMETHEUS_MULTIPROC_DIR is
# emptied at start (samples of an earlier server would be counted again);
# without one, a temporary folder lives as long as this server.
_metrics_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "").strip()
_own_metrics_dir = not _metrics_dir
if _own_metrics_dir:
    _metrics_dir = tempfile.mkdtemp(prefix="marina-metrics-")
else:
    os.makedirs(_metrics_dir, exist_ok=True)
    for _name in os.listdir(_metrics_dir):
        if _name.endswith(".db"):
            os.remove(os.path.join(_metrics_dir, _name))
os.environ["PROMETHEUS_MULTIPROC_DIR"] = _metrics_dir


def child_exit(server: Any, worker: Any) -> None:
    """A worker is gone: its live gauges (ledger queue depth) stop counting;
    its counters stay, so totals survive a worker restart."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid, _metrics_dir)


def on_exit(server: Any) -> None:
    if _own_metrics_dir:
        shutil.rmtree(_metrics_dir, ignore_errors=True)
