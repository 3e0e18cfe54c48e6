"""A real Arize Phoenix server for the tests (``arize-phoenix`` 20.26.1, installed by
``.ci/install-phoenix`` into ``~/.cache/marina/phoenix-venv``).

`start_phoenix` runs ``phoenix serve`` on free loopback ports with its working
directory (its SQLite database) in a temporary folder and a clean environment:
no provider key, no OTEL_* or PHOENIX_* variable of the caller, telemetry and
external resources off (``PHOENIX_TELEMETRY_ENABLED=false``,
``PHOENIX_ALLOW_EXTERNAL_RESOURCES=false``), so it reaches nothing beyond
loopback. OTLP over HTTP is served at ``<base_url>/v1/traces`` on the web port;
the spans are read back through its REST API and its GraphQL API (where its cost
figures are)."""
from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.servers import free_port

DEFAULT_VENV = Path.home() / ".cache/marina/phoenix-venv"
VERSION = "20.26.1"


def phoenix_venv() -> Path:
    return Path(os.environ.get("MARINA_PHOENIX_VENV") or DEFAULT_VENV)


def require_phoenix() -> Path:
    """The venv's phoenix script; skips the calling test module when absent, except in CI
    (CI=true), where `scripts/test` installs it and its absence is a failure."""
    import pytest

    script = phoenix_venv() / "bin" / "phoenix"
    if not (script.is_file() and os.access(script, os.X_OK)):
        message = f"Phoenix venv absent at {phoenix_venv()}: run .ci/install-phoenix (or set MARINA_PHOENIX_VENV)"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message, allow_module_level=True)
    return script


@dataclass
class Phoenix:
    process: subprocess.Popen[bytes]
    base_url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def graphql(self, query: str, **variables: Any) -> dict[str, Any]:
        answer = httpx.post(f"{self.base_url}/graphql", json={"query": query, "variables": variables}, timeout=30)
        answer.raise_for_status()
        body = answer.json()
        assert not body.get("errors"), body["errors"]
        return dict(body["data"])

    def spans(self, project: str) -> list[dict[str, Any]]:
        """Every span of `project`, from the REST API (`GET /v1/projects/{project}/spans`)."""
        found: list[dict[str, Any]] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
            answer = httpx.get(f"{self.base_url}/v1/projects/{project}/spans", params=params, timeout=30)
            if answer.status_code == 404:  # the project is created with its first span
                return []
            answer.raise_for_status()
            body = answer.json()
            found += body["data"]
            cursor = body.get("next_cursor")
            if not cursor:
                return found

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_phoenix(directory: Path, *, timeout: float = 120) -> Phoenix:
    script = require_phoenix()
    port, grpc_port = free_port(), free_port()
    home = directory / "home"
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "PHOENIX_WORKING_DIR": str(directory / "working"),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_TELEMETRY_ENABLED": "false",  # no FullStory / Scarf pixels
        "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",  # no web fonts, no sandbox download
        "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
        "PHOENIX_LOG_SQL": "false",
    }
    log_path = directory / "phoenix.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(script), "serve"], cwd=directory, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    phoenix = Phoenix(process, f"http://127.0.0.1:{port}", log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"phoenix serve exited with {process.returncode}:\n{phoenix.log()[-4000:]}")
        try:
            if httpx.get(f"{phoenix.base_url}/healthz", timeout=2).status_code == 200:
                return phoenix
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    phoenix.stop()
    raise RuntimeError(f"phoenix serve did not answer /healthz within {timeout} s:\n{phoenix.log()[-4000:]}")
