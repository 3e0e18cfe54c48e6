"""The headers every upstream request starts from (passthru/upstream.py):
httpx.AsyncClient's, taken without the client building a transport of its own,
which would keep httpcore and a loaded CA bundle in every worker for nothing
(docs/performance.md, issue 45)."""
from __future__ import annotations

import subprocess
import sys

import httpx

from passthru import upstream


def test_the_default_headers_are_httpx_clients():
    assert upstream._default_headers() == tuple(httpx.AsyncClient().headers.raw)


def test_taking_the_default_headers_builds_no_transport():
    # In a process of its own: this one has imported httpcore long ago.
    code = (
        "import sys, django; django.setup()\n"
        "from passthru import upstream\n"
        "assert 'httpcore' not in sys.modules, 'imported before'\n"
        "upstream._default_headers()\n"
        "print('httpcore' in sys.modules)\n"
    )
    env = {"DJANGO_SETTINGS_MODULE": "marina.settings", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
