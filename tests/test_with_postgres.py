"""scripts/with-postgres: the test suite brings its own PostgreSQL.

Run with MARINA_TEST_POSTGRES unset, it starts a throwaway cluster of its own
(a temporary directory, a free port, never the machine's server on 5432, as
`postgres` rather than root), hands its URL to the command, and stops and
removes it afterwards. Given MARINA_TEST_POSTGRES, it uses that server as is."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[1]

# What the command under with-postgres reports about the server it was given.
PROBE = """
import json, os, psycopg
url = os.environ["MARINA_TEST_POSTGRES"]
with psycopg.connect(url + "/postgres", autocommit=True, connect_timeout=5) as conn:
    conn.execute("CREATE DATABASE marina_with_postgres_probe")
    found = {
        "url": url,
        "data_directory": conn.execute("SHOW data_directory").fetchone()[0],
    }
found["data_uid"] = os.stat(found["data_directory"]).st_uid
print(json.dumps(found))
"""


def with_postgres(*command: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("MARINA_TEST_POSTGRES", "MARINA_E2E_POSTGRES")}
    return subprocess.run(
        ["bash", "scripts/with-postgres", *command],
        cwd=ROOT,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_throwaway_cluster_is_started_for_the_command_and_removed_after():
    done = with_postgres(sys.executable, "-c", PROBE)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    port = urlsplit(found["url"]).port
    # Its own server, not the machine's: another port, a temporary data directory.
    assert port and port != 5432
    data_directory = Path(found["data_directory"])
    assert data_directory.name == "data" and data_directory.parent.name.startswith("marina-pg.")
    assert found["data_uid"] != 0  # PostgreSQL refuses to run as root: the cluster is another user's
    assert found["url"] in done.stderr  # says which server it started
    # Stopped and gone afterwards.
    assert not data_directory.parent.exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(found["url"] + "/postgres", connect_timeout=3).close()


def test_the_command_exit_code_is_kept_and_the_cluster_still_stopped():
    done = with_postgres("bash", "-c", 'echo "$MARINA_TEST_POSTGRES"; exit 7')
    assert done.returncode == 7, done.stderr
    url = done.stdout.strip()
    assert url.startswith("postgres://postgres@127.0.0.1:")
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url + "/postgres", connect_timeout=3).close()


def test_a_server_given_in_marina_test_postgres_is_used_as_it_is():
    given = "postgres://postgres@127.0.0.1:1"
    done = with_postgres("bash", "-c", 'echo "$MARINA_TEST_POSTGRES"', MARINA_TEST_POSTGRES=given)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == given
    assert done.stderr == ""  # nothing started


def test_the_tests_use_the_server_scripts_test_gives_them():
    code = "from tests.e2e.servers import POSTGRES_ADMIN_URL; print(POSTGRES_ADMIN_URL)"
    given = "postgres://postgres@127.0.0.1:6543"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "MARINA_TEST_POSTGRES": given},
        capture_output=True, text=True, timeout=60,
    )
    assert done.stdout.strip() == given, done.stderr
