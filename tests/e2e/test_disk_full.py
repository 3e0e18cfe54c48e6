"""SQLite on a disk that fills up (issue 24): a small tmpfs holds the ledger
and the spool; a file fills it while calls go on. The daily cap, which can no
longer write its lease, refuses (503 spend_cap_unavailable, Retry-After)
instead of letting calls through unchecked; the calls answered meanwhile wait
in the spool (its space allocated ahead), and once space returns every one
of them is in the ledger with its exact cost."""
from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import MARINA_KEY
from tests.e2e.load import Outcome, priced_handler, run_load, summary, tiny_cost_nanousd
from tests.e2e.servers import Ledger

pytestmark = pytest.mark.e2e


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """Write a file until the disk is full."""
    filler = disk / f"filler-{uuid.uuid4().hex[:6]}"
    with open(filler, "wb", buffering=0) as f:
        for size in (1 << 20, 4096, 1):
            piece = b"\0" * size
            while True:
                try:
                    f.write(piece)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
    return filler


def _load(url: str, first: int, requests: int) -> list[Outcome]:
    return asyncio.run(run_load([url], MARINA_KEY, concurrency=4, requests=requests, first_index=first, kinds=("plain", "stream")))


def test_a_full_disk_refuses_calls_and_loses_none_it_answered(small_disk, servers, upstream, sqlite_template):
    upstream.handler = priced_handler(tiny_cost_nanousd)
    ledger: Ledger = sqlite_template.new(small_disk / "marina.sqlite3")
    # A small spool (its journals on the same disk) so that it, too, comes near
    # its end: 64 KiB before the cap's headroom, some 40 calls per worker.
    server = servers.start(
        ledger, workers=2, MARINA_DAILY_SPEND_CAP_USD="1", MARINA_SPOOL_DIR=str(small_disk / "spool"),
        MARINA_SPOOL_MAX_BYTES=str(320 << 10),
    )
    before = _load(server.base_url, 0, 20)
    assert all(o.ok for o in before), summary(before)

    filler = fill(small_disk)
    time.sleep(6)  # the leases can no longer be renewed: past LEASE_VALID_SECONDS they serve no call
    during = _load(server.base_url, 20, 200)
    refused = [o for o in during if o.status == 503]
    answered = [o for o in during if o.status == 200]
    assert refused and {o.error_code for o in refused} == {"spend_cap_unavailable"}, summary(during)
    assert len(refused) + len(answered) == len(during), summary(during)
    assert "could not record trace" not in server.log()
    assert {o.retry_after for o in refused} == {"2"}

    os.unlink(filler)  # space comes back
    everyone = before + answered
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and ledger.one(
        "SELECT COUNT(*) FROM ledger_trace WHERE http_status = 200"
    ) < len(everyone):
        time.sleep(0.2)
    totals = ledger.totals()
    assert ledger.one("SELECT COUNT(*) FROM ledger_trace WHERE http_status = 200") == len(everyone), totals
    assert totals["spend_calls"] == totals["spans"] == len(everyone) == len(upstream.requests)
    assert totals["spend_cost"] == sum(tiny_cost_nanousd(o.index) for o in everyone)
    ids = {row[0] for row in ledger.rows("SELECT request_id FROM ledger_trace WHERE http_status = 200")}
    assert ids == {o.request_id for o in everyone}
    assert ledger.integrity() == "ok"
