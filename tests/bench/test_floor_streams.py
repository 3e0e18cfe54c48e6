"""bench/slow_streams.py's `floor` target: bench/floor.py's framework-free
gateway relays a burst of streams from bench/fake_upstream.py, each whole and
metered, beside which Marina's figures for 10,000 streams are read
(docs/performance.md, issue 45)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="no C compiler for the bench's client")


def test_the_floor_relays_every_stream_whole_and_meters_it():
    done = subprocess.run(
        [sys.executable, "bench/slow_streams.py", "--streams", "40", "--first-token", "0.3", "--chunks", "2", "--gap", "0.1",
         "--targets", "floor"],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    row = re.search(r"^\| floor \| (\d+) / (\d+) \| ([\d.]+) / ", done.stdout, re.M)
    assert row, done.stdout
    assert row.group(1) == row.group(2) == "40"  # each ended with its [DONE]
    assert float(row.group(3)) >= 0.3  # the first token waited for the upstream's
    metered = re.search(r"floor's ledger: (\d+) rows with usage", done.stdout)
    assert metered and int(metered.group(1)) >= 40 + 20  # the streams, and the 20 plain calls before the burst
