"""Fixtures for the end-to-end tests: real gunicorn servers on their own
databases, pointed at the scripted upstream (tests marked `e2e`), and the τ²
CLI runs (marked `tau2`).

Every server a test starts is stopped afterwards, and its log and database
are searched for the Marina and provider keys: a secret found anywhere fails
the test that produced it."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.conftest import MARINA_KEY, PROVIDER_KEY
from tests.e2e.servers import Gunicorn, Ledger, SqliteTemplate, postgres_database, start_gunicorn
from tests.upstream import ScriptedUpstream

SECRETS = (MARINA_KEY, PROVIDER_KEY)


def pytest_configure(config: pytest.Config) -> None:
    # Registered here too so the e2e tests run under --strict-markers whatever the root config says.
    config.addinivalue_line("markers", "tau2: runs the real τ²-bench CLI (needs .ci/install-tau2 first)")


def find_secrets(text: str) -> list[str]:
    """Which keys (or a long-enough piece of one) appear in text."""
    found = []
    for secret in SECRETS:
        # A 16-character piece is enough to identify a key; look for every one.
        pieces = {secret[i : i + 16] for i in range(0, len(secret) - 15)}
        if any(piece in text for piece in pieces):
            found.append(secret)
    return found


def server_env(upstream_url: str, **overrides: str) -> dict[str, str]:
    """The environment a test server gets: one named key, OpenRouter -> the scripted upstream."""
    return {
        "MODEL_API_KEYS": f"{MARINA_KEY}:tester",
        "OPENROUTER_API_KEY": PROVIDER_KEY,
        "MARINA_OPENROUTER_BASE_URL": upstream_url,
        "MARINA_DAILY_SPEND_CAP_USD": "off",
        **overrides,
    }


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> SqliteTemplate:
    return SqliteTemplate(tmp_path_factory.mktemp("template"))


class Servers:
    """Real gunicorn servers for one test, each on its own ledger unless told otherwise."""

    def __init__(self, tmp_path: Path, upstream: ScriptedUpstream, template: SqliteTemplate, stack: ExitStack) -> None:
        self.tmp_path = tmp_path
        self.upstream = upstream
        self.template = template
        self.stack = stack
        self.started: list[tuple[Gunicorn, Ledger]] = []
        self.ledgers = 0

    def sqlite(self) -> Ledger:
        self.ledgers += 1
        return self.template.new(self.tmp_path / f"marina-{self.ledgers}.sqlite3")

    def postgres(self) -> Ledger:
        """A fresh migrated PostgreSQL database, dropped after this test's servers stop."""
        return self.stack.enter_context(postgres_database())

    def start(self, ledger: Ledger | None = None, *, workers: int = 2, port: int | None = None, **env: str) -> Gunicorn:
        ledger = ledger or self.sqlite()
        env.setdefault("MARINA_SPOOL_DIR", str(self.tmp_path / "spool"))  # the ledger's spool, this test's own
        server = start_gunicorn(
            database_url=ledger.url,
            log_path=self.tmp_path / f"gunicorn-{len(self.started)}.log",
            env=server_env(self.upstream.base_url, **env),
            workers=workers,
            port=port,
        )
        server.ledger = ledger
        self.started.append((server, ledger))
        return server

    def stop_all(self) -> None:
        for server, _ in self.started:
            try:
                server.terminate(timeout=40)
            except Exception:
                server.kill()

    def check_secrets(self) -> None:
        for server, ledger in self.started:
            assert not find_secrets(server.log()), f"a key appears in {server.log_path}"
            assert not find_secrets(ledger.dump()), f"a key appears in the database {ledger.url}"


@pytest.fixture
def servers(tmp_path: Path, upstream: ScriptedUpstream, sqlite_template: SqliteTemplate) -> Iterator[Servers]:
    """Start real gunicorn servers: `server = servers.start(**env)`. All are
    stopped when the test ends (SIGTERM, then SIGKILL), then their logs and
    databases are searched for the keys; PostgreSQL databases are dropped last."""
    with ExitStack() as stack:
        fleet = Servers(tmp_path, upstream, sqlite_template, stack)
        try:
            yield fleet
        finally:
            fleet.stop_all()
        fleet.check_secrets()
