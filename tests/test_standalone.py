"""The repository stands alone: everything the server, commands, scripts and
tests read lives in it (the τ² fixtures in tests/fixtures/tau2, with a README
saying where each came from), and nothing reaches for a directory beside the
checkout, such as ../shared."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.ledger import tau2files

ROOT = Path(__file__).resolve().parents[1]
# A path built to the checkout's parent: "../shared", parent / "shared", parents[N] / "shared".
_OUTSIDE = re.compile(r"\.\./shared|[\"']shared[\"']\s*/|/\s*[\"']shared[\"']|parents?\b[^\n]*shared")


def _code_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / name for name in listed if name.endswith((".py", ".sh", ".ini", ".toml", ".cfg")) or name.startswith((".ci/", "scripts/"))]


def test_no_code_reads_beside_the_checkout() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _code_files()
        if path.is_file() and path != Path(__file__)
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if _OUTSIDE.search(line)
    ]
    assert offenders == []


def test_the_tau2_fixtures_are_in_the_repository_with_their_provenance() -> None:
    assert tau2files.FIXTURES == ROOT / "tests" / "fixtures" / "tau2"
    readme = (tau2files.FIXTURES / "README.md").read_text()
    for name in tau2files.NAMES:
        assert tau2files.results(name).is_file() and f"`{name}.results.json`" in readme
        assert tau2files.expected(name)["num_trials"] == 4
    assert (tau2files.FIXTURES / "tools.json").is_file() and "`tools.json`" in readme
