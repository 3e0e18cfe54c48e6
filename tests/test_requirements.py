"""The README's server command installs requirements.txt only: it must hold
everything the server imports and none of the test tools, which live in
requirements-test.txt (installed by scripts/test)."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
SERVER_PACKAGES = ("kernel", "marina", "passthru", "ledger", "observability", "repro")
TEST_TOOLS = {"pytest", "pytest-django", "openai", "litellm", "playwright", "schemathesis", "ruff", "mypy", "django-stubs", "import-linter"}
TEST_MODULES = ("pytest", "pytest_django", "openai", "litellm", "playwright", "schemathesis", "mypy", "django_stubs_ext")


def requirements(path: Path) -> tuple[list[Requirement], list[str]]:
    """The requirement lines of a file, and the files it includes with -r."""
    reqs, includes = [], []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            includes.append(line[3:].strip())
        elif line:
            reqs.append(Requirement(line))
    return reqs, includes


def closure(reqs: list[Requirement]) -> set[str]:
    """Every distribution that installing `reqs` brings, as installed here."""
    seen: set[str] = set()
    todo = [(r, frozenset(r.extras)) for r in reqs]
    while todo:
        req, extras = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen and not extras:
            continue
        seen.add(name)
        for line in metadata.distribution(req.name).requires or []:
            dep = Requirement(line)
            envs = [{"extra": e} for e in extras] or [{"extra": ""}]
            if dep.marker is None or any(dep.marker.evaluate(env) for env in envs):
                todo.append((dep, frozenset(dep.extras)))
    return seen


def third_party_imports() -> set[str]:
    """Top-level modules the server's code imports, less the stdlib and its own packages."""
    found = set()
    for package in SERVER_PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    found |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - set(SERVER_PACKAGES) - {"__future__"}


def test_requirements_txt_holds_no_test_tool_and_the_test_file_includes_it():
    runtime, includes = requirements(ROOT / "requirements.txt")
    assert includes == []
    assert {canonicalize_name(r.name) for r in runtime} & TEST_TOOLS == set()
    test, test_includes = requirements(ROOT / "requirements-test.txt")
    assert test_includes == ["requirements.txt"]
    assert TEST_TOOLS <= {canonicalize_name(r.name) for r in test}


def test_every_module_the_server_imports_comes_from_requirements_txt():
    installed = closure(requirements(ROOT / "requirements.txt")[0])
    providers = metadata.packages_distributions()
    missing = {
        module: providers.get(module)
        for module in third_party_imports()
        if not {canonicalize_name(d) for d in providers.get(module, [])} & installed
    }
    assert missing == {}, f"imported by the server but not brought by requirements.txt: {missing}"


def test_the_server_starts_without_any_test_tool():
    """Import every server module and run Django's checks with the test tools made unimportable."""
    blocked = "|".join(TEST_MODULES)
    script = f"""
import importlib, pkgutil, re, sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if re.fullmatch(r"({blocked})(\\..*)?", name):
            raise ImportError(f"{{name}} is a test tool")
sys.meta_path.insert(0, Blocked())
import django
django.setup()
for package in {SERVER_PACKAGES!r}:
    for info in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
        importlib.import_module(info.name)
import marina.asgi
from django.core.management import call_command
call_command("check")
print("server imports ok")
"""
    env = {"DJANGO_SETTINGS_MODULE": "marina.settings", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "server imports ok" in done.stdout
    assert not re.search(r"is a test tool", done.stderr)
