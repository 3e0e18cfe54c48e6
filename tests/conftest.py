"""Shared fixtures: no network but loopback, a scripted upstream, Marina in-process
(its real ASGI app on an event loop in a thread, no socket: tests/in_process.py), and a
live Marina (the same app under uvicorn, in a thread, on an ephemeral port)."""
from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import openai
import pytest
import uvicorn

from tests.in_process import AsgiBridge, InProcessMarina, ScriptedTransport, event_loop_thread
from tests.upstream import ScriptedUpstream

if TYPE_CHECKING:
    from tests.otlp_receiver import OtlpReceiver

MARINA_KEY = "sk-marina-test-key-0123456789"
PROVIDER_KEY = "sk-or-test-provider-key-9876543210"


# Modules that import a client library costing seconds of CPU to import (litellm 3-4 s, the
# anthropic SDK 2 s) run on one pytest-xdist worker each, so a library is imported once per
# suite instead of once in every worker that meets one of them (scripts/test; docs/performance.md).
# Every other module is its own scope, as under --dist loadscope.
SHARED_IMPORT_SCOPES = {
    "litellm": (
        "tests/passthru/test_litellm.py",
        "tests/passthru/test_routing.py",
        "tests/passthru/formations/test_streaming.py",
        "tests/passthru/formations/verify/test_formation.py",
    ),
    "anthropic": ("tests/passthru/doors/test_messages.py", "tests/passthru/doors/test_limits.py"),
}
_SCOPE_OF_MODULE = {module: scope for scope, modules in SHARED_IMPORT_SCOPES.items() for module in modules}


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") != "loadscope":
        return None  # xdist's own choice
    from xdist.scheduler import LoadScopeScheduling

    class SharedImportScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return _SCOPE_OF_MODULE.get(module) or super()._split_scope(nodeid)

    return SharedImportScheduling(config, log)


# --- No test reaches beyond loopback ----------------------------------------
_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _check_address(sock: socket.socket, address: object) -> None:
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return  # Unix sockets (PostgreSQL's) are local by definition
    host = address[0] if isinstance(address, tuple) else str(address)
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise OSError(f"test tried to reach {host}: only loopback is allowed in tests")


def _guarded_connect(self: socket.socket, address: object) -> None:
    _check_address(self, address)
    return _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: object) -> int:
    _check_address(self, address)
    return _real_connect_ex(self, address)


socket.socket.connect = _guarded_connect
socket.socket.connect_ex = _guarded_connect_ex


# --- The scripted upstream --------------------------------------------------
@pytest.fixture(scope="session")
def _upstream_server() -> Iterator[ScriptedUpstream]:
    server = ScriptedUpstream().start()
    yield server
    server.stop()


@pytest.fixture
def upstream(_upstream_server: ScriptedUpstream) -> Iterator[ScriptedUpstream]:
    _upstream_server.reset()
    yield _upstream_server
    _upstream_server.reset()


@pytest.fixture
def marina_config(settings, upstream: ScriptedUpstream):
    """Marina configured for tests: one named key, OpenRouter pointed at the scripted upstream."""
    settings.MODEL_API_KEYS = f"{MARINA_KEY}:tester"
    settings.MARINA_OPEN_API = False
    providers = {name: dict(conf) for name, conf in settings.MARINA_PROVIDERS.items()}
    providers["openrouter"] = {"base_url": upstream.base_url, "api_key": PROVIDER_KEY, "key_env": "OPENROUTER_API_KEY"}
    providers["openai"] = {"base_url": upstream.base_url, "api_key": "", "key_env": "OPENAI_API_KEY"}
    settings.MARINA_PROVIDERS = providers
    settings.MARINA_DAILY_SPEND_CAP_USD = None
    from passthru import auth

    auth.forget()  # stored keys read by an earlier test's server
    return settings


# --- A live Marina ------------------------------------------------------------
class _ThreadedServer(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # only the main thread may
        pass


@contextmanager
def serve_in_thread(app: Any, **config: Any) -> Iterator[str]:
    """An ASGI app served by uvicorn on a free loopback port, in a thread; yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = _ThreadedServer(uvicorn.Config(app, lifespan="off", log_level="warning", **config))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(5)


@pytest.fixture(scope="session")
def _marina_server(django_db_setup, django_db_blocker) -> Iterator[str]:
    from marina.asgi import application

    with serve_in_thread(application, proxy_headers=False) as url:
        yield url
    _close_marinas_connections(django_db_blocker)


def _close_marinas_connections(django_db_blocker: Any) -> None:
    """Close the connections Marina's own threads hold (ledger writer, limiter, daily cap) before
    the test database is dropped; harmless twice."""
    from ledger.spend.services import close_writer_connection
    from passthru import ratelimit, spendcap

    with django_db_blocker.unblock():
        close_writer_connection()
        ratelimit.close_connection()
        spendcap.submit(spendcap.forget).result()
        spendcap.close_connection()


@pytest.fixture
def marina_url(_marina_server: str, transactional_db, marina_config) -> str:
    """Base URL of a live Marina (append /v1 for clients). Uses transactional_db:
    the server and the ledger writer run in other threads, so the test's data
    must really be committed."""
    from passthru import spendcap

    # The daily cap's lease lives in this process, its row in the test's
    # database: a lease from the case before (its row flushed) must not serve calls.
    spendcap.submit(spendcap.forget).result()
    return _marina_server


# --- Marina in-process --------------------------------------------------------------
@pytest.fixture(scope="session")
def _marina_loop(django_db_setup, django_db_blocker) -> Iterator[asyncio.AbstractEventLoop]:
    """The event loop in-process Marina runs on, in a thread (as uvicorn's for marina_url)."""
    with event_loop_thread() as loop:
        yield loop
    _close_marinas_connections(django_db_blocker)


@pytest.fixture
def marina(_marina_loop, transactional_db, marina_config, upstream: ScriptedUpstream) -> Iterator[InProcessMarina]:
    """Marina's whole ASGI application called in-process (no socket, no uvicorn), its providers
    answered by the scripted upstream through passthru/upstream.py's transport seam
    (tests/in_process.py): `marina.http` (httpx, base URL set), `marina.openai()`, `marina.url`.
    For tests whose subject is what Marina answers; those about the socket use `marina_url`.
    transactional_db, as marina_url: the ledger writer records from its own thread and connection."""
    from marina.asgi import application
    from passthru import spendcap
    from passthru import upstream as upstream_client

    spendcap.submit(spendcap.forget).result()  # as marina_url does: no lease from the case before
    scripted = ScriptedTransport(upstream)
    upstream_client.use_transport(scripted)
    bridge = AsgiBridge(application, _marina_loop)
    in_process = InProcessMarina(bridge, MARINA_KEY)
    yield in_process
    in_process.close()
    upstream_client.use_transport(None)
    bridge.run(scripted.aclose())


@pytest.fixture
def openai_client(marina: InProcessMarina) -> openai.OpenAI:
    """The openai SDK pointed at in-process Marina with the test key, no retries (a retry would hide
    the status under test). Named for what it is: pytest-django's `client` is Django's test client.
    Over a socket: `openai.OpenAI(base_url=f"{marina_url}/v1", api_key=MARINA_KEY, max_retries=0)`."""
    return marina.openai()


@pytest.fixture(scope="session")
def _site_server(django_db_setup: None, django_db_blocker: object) -> Iterator[str]:
    """A second live server: the whole site's Django handler alone (no /v1 door)."""
    from marina.asgi import site_application

    with serve_in_thread(site_application) as url:
        yield url


@pytest.fixture
def urls(marina_url: str, _site_server: str) -> dict[str, str]:
    """The same answer asked of /v1's door and of the site's handler (tests/marina/test_one_door.py)."""
    return {"door": marina_url, "site": _site_server}


# --- An OpenTelemetry collector ---------------------------------------------------
@pytest.fixture
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """A real OTLP/HTTP trace receiver on loopback (tests/otlp_receiver.py), stopped afterwards."""
    from tests.otlp_receiver import OtlpReceiver  # imports OpenTelemetry's protobuf messages: only when used

    receiver = OtlpReceiver().start()
    yield receiver
    receiver.stop()
