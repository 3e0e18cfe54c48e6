"""The gunicorn worker class (gunicorn.conf.py): uvicorn's, with its fast
parts named rather than picked by "auto", so that a missing uvloop or
httptools fails at start instead of quietly costing several times the CPU
(the pure-Python asyncio loop and h11 parser)."""
from __future__ import annotations

from typing import Any

from uvicorn_worker import UvicornWorker


class MarinaWorker(UvicornWorker):
    # proxy_headers off: uvicorn would otherwise replace the client's address
    # with X-Forwarded-For whenever the peer is 127.0.0.1 (gunicorn's default
    # forwarded_allow_ips), so any local process could pick its rate-limit
    # bucket. Marina reads X-Forwarded-For itself, only with MARINA_TRUST_PROXY.
    CONFIG_KWARGS: dict[str, Any] = {"loop": "uvloop", "http": "httptools", "proxy_headers": False}
