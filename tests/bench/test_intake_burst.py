"""bench/intake_burst.py: a burst of streams handed to Marina's application
and to bench/floor.py's in one process, each counted once its request is
written to the upstream (docs/performance.md, issue 45)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_each_target_takes_the_burst_in_and_reports_its_cpu_a_stream():
    done = subprocess.run(
        [sys.executable, "bench/intake_burst.py", "--streams", "30", "--rounds", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    for target in ("marina", "floor"):
        row = re.search(rf"^\| {target} \| ([\d.]+), ([\d.]+) \| \*\*([\d.]+)\*\* \| ([\d.]+) / ([\d.]+) \|", done.stdout, re.M)
        assert row, done.stdout
        rounds, median = [float(row.group(1)), float(row.group(2))], float(row.group(3))
        assert all(cpu > 0 for cpu in rounds)  # every round ended: all 30 requests reached the upstream
        assert min(rounds) <= median <= max(rounds)
        assert float(row.group(4)) + float(row.group(5)) > 0
