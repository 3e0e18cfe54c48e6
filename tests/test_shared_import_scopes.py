"""tests/conftest.py's shared-import scopes stay true to the modules: each module named imports its
library, and every unit-suite module that imports one is named (else it pays seconds of the
library's import on a worker of its own, unnoticed)."""
from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import SHARED_IMPORT_SCOPES

ROOT = Path(__file__).resolve().parents[1]
# Where the suite meets each library: its import, or the helpers that import it.
USES = {
    "litellm": re.compile(r"^\s*import litellm\b|\btau2_litellm\(", re.MULTILINE),
    "anthropic": re.compile(r"^\s*import anthropic\b|\.anthropic\(", re.MULTILINE),
}


def _unit_modules() -> list[Path]:
    tests = ROOT / "tests"
    return [p for p in sorted(tests.rglob("test_*.py")) if p.relative_to(tests).parts[0] not in ("e2e", "browser")]


def test_every_named_module_uses_its_library():
    assert set(SHARED_IMPORT_SCOPES) == set(USES)
    for library, modules in SHARED_IMPORT_SCOPES.items():
        for module in modules:
            assert USES[library].search((ROOT / module).read_text()), f"{module} does not use {library}"


def test_every_unit_module_using_a_shared_library_is_named():
    for library, pattern in USES.items():
        using = {p.relative_to(ROOT).as_posix() for p in _unit_modules() if pattern.search(p.read_text())}
        assert using == set(SHARED_IMPORT_SCOPES[library])
