"""Where a request's time goes before its first byte: Marina's ASGI application
called in this process (no gunicorn, no client socket) against the fake
upstream, with a clock read at each stage, for requests sent back to back
("warm") and after the worker idled (`--idle-ms`, "cold").

    .venv/bin/python bench/stages.py                       # streams and plain calls, warm and after 20 ms idle
    .venv/bin/python bench/stages.py --modes stream --idle-ms 0,5,20

Why: at c=1 a stream's time to first byte is measured on a worker that has
idled for the previous stream's length (~22 ms with the fake upstream), and on
this virtual machine the same Python runs markedly slower after an idle spell
than right after another request (docs/performance.md, "Time to first byte").
This shows it stage by stage. The stages are read by wrapping a few functions
of Marina's in this process only; each wrapper costs ~1 µs.

Printed: for each mode and idle time, the median milliseconds from the ASGI
call to each stage, and the first byte; then the warm-to-cold ratios."""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tau2_body
from common import ROOT, asgi_call, chat_scope, marina_env, migrate, start_fake_upstream

KEY = "sk-marina-bench-key-0000"
MODEL = "openai/gpt-4.1-mini"
_marks: dict[str, float] = {}


def _mark(name: str) -> None:
    _marks.setdefault(name, time.perf_counter())


def _wrap(owner: Any, attribute: str, label: str) -> None:
    """Mark `label>` when owner.attribute is called and `label<` when it returns."""
    original: Callable[..., Any] = getattr(owner, attribute)
    if asyncio.iscoroutinefunction(original):
        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            _mark(f"{label}>")
            result = await original(*args, **kwargs)
            _mark(f"{label}<")
            return result
        setattr(owner, attribute, timed_async)
    else:
        def timed(*args: Any, **kwargs: Any) -> Any:
            _mark(f"{label}>")
            result = original(*args, **kwargs)
            _mark(f"{label}<")
            return result
        setattr(owner, attribute, timed)


def _instrument() -> Any:
    """Marina's application, with the stages marked."""
    import marina.asgi  # sets Django up: before the modules below, whose models need it
    from marina import mounts
    from passthru import api, spendcap, upstream
    from passthru.doors import chat

    _wrap(mounts.ApiHandler, "read_body", "django: read body")
    _wrap(mounts.ApiHandler, "resolve_request", "django: resolve URL")
    _wrap(api, "_serve", "view")
    _wrap(chat, "parse_body", "parse body")
    _wrap(spendcap, "hold", "spend cap hold")
    _wrap(upstream, "_send", "upstream: headers")  # from sending the request to the reply's headers
    _wrap(api, "to_django", "django response")
    return marina.asgi.application


async def _one(application: Any, scope: dict[str, Any], body: bytes) -> dict[str, float]:
    _marks.clear()

    def on_send(message: Mapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            _mark("response start")
        elif message.get("body"):
            _mark("first byte")

    _mark("asgi call")
    await asgi_call(application, scope, body, on_send)
    start = _marks["asgi call"]
    return {name: (at - start) * 1000 for name, at in _marks.items()}


async def _series(application: Any, mode: str, idle_ms: float, n: int) -> dict[str, float]:
    body = tau2_body.encoded(MODEL, stream=mode == "stream")
    scope = chat_scope(body, KEY)
    rows = []
    for _ in range(n):
        if idle_ms:
            await asyncio.sleep(idle_ms / 1000)
        rows.append(await _one(application, scope, body))
    names = sorted(rows[0], key=lambda name: rows[0][name])
    return {name: statistics.median(row[name] for row in rows if name in row) for name in names}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modes", default="stream,plain")
    parser.add_argument("--idle-ms", default="0,20", help="pauses before each request, comma list (0: back to back)")
    parser.add_argument("--requests", type=int, default=1000, help="measured requests per cell (after 200 to warm up)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="marina-stages-"))
    upstream, port = start_fake_upstream(tmp, "--gap-ms", "1")
    try:
        env = marina_env(db_url=f"sqlite:///{tmp / 'stages.sqlite3'}", upstream_port=port, bind="127.0.0.1:0", key=KEY)
        migrate(env)
        os.environ.update(env)
        os.environ["DJANGO_SETTINGS_MODULE"] = "marina.settings"
        os.chdir(ROOT)
        sys.path.insert(0, str(ROOT))
        application = _instrument()

        async def run() -> None:
            for mode in args.modes.split(","):
                await _series(application, mode, 0, 200)  # imports, pools, price tables
                cells = {idle: await _series(application, mode, float(idle), args.requests)
                         for idle in args.idle_ms.split(",")}
                idles = list(cells)
                print(f"\n### {mode}: ms from the ASGI call (median of {args.requests})\n")
                print("| stage | " + " | ".join(f"idle {i} ms" for i in idles) + " |")
                print("| --- |" + " --- |" * len(idles))
                for name in cells[idles[0]]:
                    print(f"| {name} | " + " | ".join(f"{cells[i].get(name, float('nan')):.3f}" for i in idles) + " |")
                upstream_leg = {i: cells[i]["upstream: headers<"] - cells[i]["upstream: headers>"] for i in idles}
                own = {i: cells[i]["first byte"] - upstream_leg[i] for i in idles}
                print("\nMarina's own time to the first byte (first byte less the upstream leg): "
                      + ", ".join(f"idle {i} ms: {own[i]:.3f} ms" for i in idles))

        try:
            import uvloop
            uvloop.run(run())
        except ImportError:
            asyncio.run(run())
    finally:
        upstream.stop()


if __name__ == "__main__":
    main()
