"""The gunicorn worker class (gunicorn.conf.py): uvicorn's, with its fast
parts named rather than picked by "auto", so that a missing uvloop or
httptools fails at start instead of quietly costing several times the CPU
(the pure-Python asyncio loop and h11 parser)."""
from __future__ import annotations

from typing import Any

from uvicorn_worker import UvicornWorker


class MarinaWorker(UvicornWorker):
    CONFIG_KWARGS: dict[str, Any] = {"loop": "uvloop", "http": "httptools"}
