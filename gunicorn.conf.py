"""gunicorn settings for Marina (ASGI workers). Every value can be set from
the environment or from .env; see .env.example."""
from __future__ import annotations

import gc
import os
import resource
import runpy
import shutil
import tempfile
from pathlib import Path
from typing import Any

from kernel.env import ConfigError, env_bool, env_int, env_log_level, env_str, load_env_file
from kernel.proxies import uvicorn_allow_ips

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
    # MARINA_REUSE_PORT=true gives each worker its own listening socket
    # (SO_REUSEPORT): the kernel spreads new connections over the workers by hash
    # instead of letting whichever worker wakes first take them. A burst of
    # 10,000 streams then splits 50/50 where the shared socket gave one worker up
    # to 65 % of it, and its memory with it (docs/performance.md). Off by
    # default: a worker that dies resets the connections still waiting in its
    # own queue, and a second server could bind the same port without an error.
    reuse_port = env_bool("MARINA_REUSE_PORT", False)
    # Connections the workers have not taken yet wait in the kernel's accept
    # queue; a full queue drops the next connection attempt, which the client
    # makes again 1 s later (then 3, 7 s). gunicorn's 2,048 dropped 1,000-18,000
    # attempts of a burst of 10,000 streams here (docs/performance.md). Linux
    # caps the queue at net.core.somaxconn (4,096 by default since 5.4).
    backlog = env_int("MARINA_BACKLOG", 16384, minimum=1)
    loglevel = env_log_level()
    # uvicorn believes X-Forwarded-For (and -Proto) from these peers only. Its
    # default, 127.0.0.1, would let any local caller pick its address (and so
    # its rate-limit bucket): only the CIDRs of MARINA_TRUSTED_PROXIES, else
    # nobody (a count is applied by Marina itself, kernel/proxies.py).
    _trusted = env_str("MARINA_TRUSTED_PROXIES") or ("1" if env_bool("MARINA_TRUST_PROXY", False) else "")
    try:
        forwarded_allow_ips = uvicorn_allow_ips(_trusted)
    except ValueError as _exc:
        raise ConfigError(f"MARINA_TRUSTED_PROXIES: {_exc}") from None
except ConfigError as exc:
    raise SystemExit(f"Error: Marina's configuration: {exc}") from None
worker_class = "marina.worker.MarinaWorker"  # uvicorn + uvloop + httptools (marina/worker.py)
keepalive = 75  # above typical client/LB idle timeouts, so pooled connections survive
accesslog = env_str("MARINA_ACCESS_LOG") or None  # off by default: traces hold per-request data
errorlog = "-"
# gunicorn >= 25 opens a control socket at one fixed path per user: two
# servers on one host (scale-out, a test beside a dev server) would take it
# from each other. Off unless MARINA_CONTROL_SOCKET names a path for this one.
control_socket = os.environ.get("MARINA_CONTROL_SOCKET") or "gunicorn.ctl"
control_socket_disable = not os.environ.get("MARINA_CONTROL_SOCKET")


# Each streamed call holds two file descriptors in its worker (the client's
# socket and the provider's) for as long as it runs, and thousands may run at
# once (MARINA_UPSTREAM_MAX_CONNECTIONS). The soft limit is often 1024: raise it
# to the hard limit, here in the master, so that every worker inherits it.
_soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if _soft != resource.RLIM_INFINITY and _hard != resource.RLIM_INFINITY and _soft < _hard:
    resource.setrlimit(resource.RLIMIT_NOFILE, (_hard, _hard))


def on_starting(server: Any) -> None:
    """Read Marina's settings once in the master, before any worker: a malformed
    variable stops the server with one line naming it (gunicorn prints a
    RuntimeError as `Error: ...` and exits 1), not a traceback per worker."""
    try:
        marina = runpy.run_path(str(Path(__file__).resolve().parent / "marina" / "settings.py"))
    except ConfigError as exc:
        raise RuntimeError(f"Marina's configuration: {exc}") from None
    # The ledger's spool must be writable: else every call would be refused
    # (503) with the database well (ledger/spend/spool.py).
    from ledger.spend.spool import unwritable

    problem = unwritable(Path(marina["MARINA_SPOOL_DIR"]))
    if problem:
        raise RuntimeError(f"Marina's configuration: {problem}")


def post_worker_init(worker: Any) -> None:
    """What the worker has loaded (Django, the URLconf, the NinjaAPI, the
    price tables) lives as long as it does: move it out of the collector's
    reach, so a full collection scans only what requests allocate. Under load
    the collector cost 0.17–0.3 ms per call here, 0.05–0.1 ms once frozen
    (docs/performance.md). When it runs is the worker's own schedule
    (kernel/collector.py, started by marina/worker.py's MarinaServer)."""
    gc.freeze()


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
