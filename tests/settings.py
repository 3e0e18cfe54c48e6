"""Marina's settings as the tests see them (pytest.ini's DJANGO_SETTINGS_MODULE).

The tests must never reach a real provider, nor take their configuration from
the person running them: a developer's `.env` (which the README recommends,
perhaps pointing at a local model server) and the provider keys and base URLs
exported in their shell are dropped before marina.settings reads anything.
Kept: where the tests' own PostgreSQL is (DATABASE_URL for the suite on
PostgreSQL, MARINA_TEST_POSTGRES), the τ² and Phoenix installs and the bench knobs.
Subprocesses inherit the cleaned environment, `.env` included (MARINA_ENV_FILE
names the empty file)."""
from __future__ import annotations

import os

_KEPT_PREFIXES = ("MARINA_TEST_", "MARINA_E2E_", "MARINA_TAU2_", "MARINA_PHOENIX_", "MARINA_BENCH_")
_DROPPED_PREFIXES = ("MARINA_", "OTEL_")
_DROPPED_SUFFIXES = ("_API_KEY", "_API_KEY_FILE", "_BASE_URL")
_DROPPED = {"MODEL_API_KEYS", "MODEL_API_KEYS_FILE", "WEB_CONCURRENCY", "GUNICORN_CMD_ARGS"}


def _dropped(name: str) -> bool:
    if name.startswith(_KEPT_PREFIXES):
        return False
    return name in _DROPPED or name.startswith(_DROPPED_PREFIXES) or name.endswith(_DROPPED_SUFFIXES)


for _name in [name for name in os.environ if _dropped(name)]:
    del os.environ[_name]
os.environ["MARINA_ENV_FILE"] = os.devnull  # exists, is not a file: nothing is read

from marina.settings import *  # noqa: E402,F403

# A suite started by a test (tests/test_env_isolation.py) names its own test database, so that its
# set-up and tear-down do not drop the tables of the suite that started it.
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3" and os.environ.get("MARINA_TEST_SQLITE"):  # noqa: F405
    DATABASES["default"]["TEST"] = {"NAME": os.environ["MARINA_TEST_SQLITE"]}  # noqa: F405

# The tests make a user (and log one in) in over a hundred cases: PBKDF2 spends 0.23 s of CPU on each
# hash and each check. A fast hasher, as Django's testing docs advise; Marina itself keeps PBKDF2.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
