"""bench/stream_client.c, the slow-streams bench's load generator, read against
the scripted upstream: its first token, its end and its failures are the
figures docs/performance.md reports for 10,000 streams."""
from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.upstream import Reply, ScriptedUpstream, Sse

ROOT = Path(__file__).resolve().parents[2]
BODY = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "x" * 20000}]}).encode()

pytestmark = pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="no C compiler to build it")


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    binary = tmp_path_factory.mktemp("stream-client") / "stream_client"
    compiler = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([str(compiler), "-O2", "-Wall", "-Werror", "-o", str(binary), str(ROOT / "bench" / "stream_client.c")],
                   check=True)
    return binary


def _run(client: Path, upstream: ScriptedUpstream, streams: int, tmp_path: Path) -> tuple[float, list[tuple[float, float, str]]]:
    """(the burst's monotonic start, each stream's (first, end, error)) as the client printed them."""
    port = int(upstream.base_url.split(":")[2].split("/")[0])
    request = tmp_path / "request.http"
    request.write_bytes(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1:%d\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (port, len(BODY), BODY)
    )
    done = subprocess.run([str(client), str(port), str(request), str(streams), "20"], capture_output=True, text=True,
                          timeout=60, check=True)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("start ") and lines[-1].startswith("cpu ")
    rows = [line.split() for line in lines[1:-1]]
    return float(lines[0].split()[1]), [(float(first), float(end), error) for first, end, error in rows]


def test_each_stream_s_first_token_and_end_are_when_they_came(client: Path, upstream: ScriptedUpstream, tmp_path: Path):
    upstream.script(*[Sse(delay=0.4, gap=0.1) for _ in range(3)])
    started = time.monotonic()
    start, outcomes = _run(client, upstream, 3, tmp_path)
    assert started <= start <= time.monotonic()  # the same clock as time.monotonic()
    assert len(outcomes) == 3
    for first, end, error in outcomes:
        assert error == "-"
        assert 0.4 <= first - start < 2.0  # the upstream waited 0.4 s before its first event
        assert end - first >= 0.3  # then four more chunks 0.1 s apart, usage and [DONE]
    assert len(upstream.requests) == 3
    assert all(r.body["messages"][0]["content"] == "x" * 20000 for r in upstream.requests)  # the whole body, each time


@pytest.mark.parametrize("step, error", [
    (Reply(status=500, json={"error": {"message": "boom"}}), "status_not_200"),
    (Sse(done=False), "closed_before_done"),
    (Reply(raw=b'data: {"error": {"message": "overloaded"}}\n\n', content_type="text/event-stream"), "error_event"),
])
def test_a_stream_that_does_not_end_with_done_is_counted_failed(client: Path, upstream: ScriptedUpstream, tmp_path: Path,
                                                               step: Reply | Sse, error: str):
    upstream.script(step)
    _, outcomes = _run(client, upstream, 1, tmp_path)
    assert [(end, err) for _, end, err in outcomes] == [(-1.0, error)]


def test_nothing_listening_is_a_connect_error(client: Path, tmp_path: Path):
    import socket

    with socket.socket() as sock:  # a port nobody listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        request = tmp_path / "request.http"
        request.write_bytes(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        done = subprocess.run([str(client), str(port), str(request), "2", "5"], capture_output=True, text=True,
                              timeout=30, check=True)
    assert done.stdout.splitlines()[1:3] == ["-1.000000 -1.000000 connect_error"] * 2
