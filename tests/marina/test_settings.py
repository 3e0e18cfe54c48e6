"""What marina/settings.py decides for the processes it configures, checked
in processes of their own (this one has long loaded everything)."""
from __future__ import annotations

import subprocess
import sys

# A worker's start: the app, its URLs, and the tables the report pages draw.
_WORKER = (
    "import sys\n"
    "import marina.asgi\n"
    "from django.urls import get_resolver\n"
    "get_resolver().url_patterns\n"
    "import django_tables2\n"
    "from django_tables2.columns import JSONColumn\n"
    "print('psycopg' in sys.modules)\n"
    "try:\n"
    "    from django.contrib.postgres.fields import ArrayField\n"
    "    print('importable')\n"
    "except ImportError:\n"
    "    print('missing')\n"
)


def _run(database_url: str) -> subprocess.CompletedProcess[str]:
    env = {"DJANGO_SETTINGS_MODULE": "marina.settings", "MARINA_SECRET_KEY": "test-only-secret", "PATH": "/usr/bin:/bin"}
    if database_url:
        env["DATABASE_URL"] = database_url
    return subprocess.run([sys.executable, "-c", _WORKER], capture_output=True, text=True, env=env, timeout=120)


def test_a_sqlite_worker_does_not_load_psycopg():
    """django_tables2 tries django.contrib.postgres at import, which loads
    psycopg and libpq: 9.8 MB of every worker of a SQLite install. Settings
    mark it missing there, as if psycopg were not installed: the tables still
    import, and the worker never loads psycopg."""
    done = _run("")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "missing"]


def test_a_postgresql_worker_keeps_django_contrib_postgres():
    """On PostgreSQL psycopg is the driver anyway, and nothing is marked missing
    (no connection is made: the URL only chooses the settings)."""
    done = _run("postgres://marina@127.0.0.1:5432/marina")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "importable"]
