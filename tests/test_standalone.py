"""The repository stands alone: everything the server, commands, scripts and
tests read lives in it (the τ² fixtures in tests/fixtures/tau2, with a README
saying where each came from), and nothing reaches for a directory beside the
checkout, such as ../shared — but the optional installer of sierra's τ² (.ci/install-tau2-sierra),
which takes its source from there when it is present; the tests read only what it installed, and
skip, saying why, without it."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.e2e.tau2_cli import require_sierra
from tests.ledger import tau2files

ROOT = Path(__file__).resolve().parents[1]
OPTIONAL_INSTALLERS = {ROOT / ".ci" / "install-tau2-sierra"}
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
        if path.is_file() and path != Path(__file__) and path not in OPTIONAL_INSTALLERS
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


def test_a_clone_without_sierras_source_skips_its_tests_saying_why(tmp_path, monkeypatch) -> None:
    """The installer, given no source, installs nothing and says why; the tests that need it skip with that."""
    env = {**os.environ, "MARINA_TAU2_SIERRA_TARBALL": str(tmp_path / "absent.tar.gz"),
           "MARINA_TAU2_SIERRA_VENV": str(tmp_path / "cache" / "tau2-sierra-venv"),
           "MARINA_TAU2_SIERRA_SRC": str(tmp_path / "cache" / "tau2-sierra-src")}  # fmt: skip
    done = subprocess.run(["bash", str(ROOT / ".ci" / "install-tau2-sierra")], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == ""  # no tau2 path: nothing installed
    assert "not found; sierra's τ² not installed (its tests skip)" in done.stderr
    for name in ("MARINA_TAU2_SIERRA_VENV", "MARINA_TAU2_SIERRA_SRC"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.delenv("MARINA_TAU2_SIERRA_BIN", raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        require_sierra()
    assert f"no source tarball at {tmp_path / 'absent.tar.gz'}" in str(skipped.value)
    assert "the tests that need banking_knowledge, telecom's user tools or sierra's submission layout skip" in str(skipped.value)
