"""The tests take nothing from the person running them: with a `.env` the
README recommends (here pointing every provider at a local server that would
answer 200) and provider keys exported in the shell, the suite's own tests
still see only their scripted upstream (tests/settings.py drops both)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.upstream import ScriptedUpstream

ROOT = Path(__file__).resolve().parents[1]
CHOSEN = [
    "tests/passthru/test_errors.py::test_unknown_prefix_nobody_serves_is_404_model_not_found",
    "tests/passthru/test_errors.py::test_provider_without_key_is_503_naming_the_variable",
]


def test_a_dot_env_and_exported_provider_variables_do_not_reach_the_tests(tmp_path: Path) -> None:
    local = ScriptedUpstream().start()  # the developer's local model server: answers anything
    try:
        env_file = tmp_path / ".env"
        env_file.write_text(
            f"MARINA_EXTRA_PROVIDERS=local={local.base_url}\n"
            f"MARINA_TOGETHER_BASE_URL={local.base_url}\nTOGETHER_API_KEY=sk-from-dot-env\n"
            "MARINA_PROVIDER_ORDER=local,openrouter\n"
        )
        caller = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}  # pytest.ini decides
        # A database of its own (SQLite, in tmp_path): the suite running this test uses the usual
        # test database, and the inner suite's set-up and tear-down would drop its tables.
        caller.pop("DATABASE_URL", None)
        caller["MARINA_TEST_SQLITE"] = str(tmp_path / "inner.sqlite3")
        caller.update({"MARINA_ENV_FILE": str(env_file), "OPENAI_API_KEY": "sk-exported-in-the-shell",
                       "MARINA_OPENAI_BASE_URL": local.base_url})
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *CHOSEN],
            cwd=ROOT, env=caller, capture_output=True, text=True, timeout=300,
        )
        assert done.returncode == 0, done.stdout[-3000:]
        assert local.requests == [], "a test reached the developer's provider"
    finally:
        local.stop()
