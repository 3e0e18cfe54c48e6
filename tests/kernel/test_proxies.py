"""Whose address a request is (kernel/proxies.py): X-Forwarded-For is believed
only from configured proxies, and the client is the right-most hop that is not
one of them, so the hops a client writes itself change nothing; and gunicorn's
uvicorn believes no forwarded header unless told which proxies to trust."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernel.proxies import client_address, parse, uvicorn_allow_ips

ROOT = Path(__file__).resolve().parents[2]


def xff(value: str) -> dict[str, str]:
    return {"x-forwarded-for": value}


def test_untrusted_by_default_the_peer_is_the_client():
    assert client_address("127.0.0.1", xff("10.0.0.1"), parse("")) == "127.0.0.1"
    assert client_address("127.0.0.1", {"x-real-ip": "10.0.0.1"}, parse("")) == "127.0.0.1"


def test_spoofed_first_hops_all_land_on_the_one_real_client():
    """A proxy appends the address it saw: what the client sent stays to its left."""
    one_proxy = parse("1")
    seen = {client_address("10.9.9.9", xff(f"6.6.6.{i}, 203.0.113.7"), one_proxy) for i in range(8)}
    assert seen == {"203.0.113.7"}
    two = parse("2")  # a CDN, then a load balancer
    assert client_address("10.0.0.2", xff("6.6.6.6, 203.0.113.7, 198.51.100.1"), two) == "203.0.113.7"
    assert client_address("10.0.0.2", xff("203.0.113.7"), two) == "203.0.113.7"  # came through fewer


def test_cidrs_trust_only_their_peers_and_skip_their_own_hops():
    trusted = parse("10.0.0.0/8, 192.168.1.7")
    assert client_address("10.1.2.3", xff("6.6.6.6, 203.0.113.7, 10.4.4.4"), trusted) == "203.0.113.7"
    assert client_address("192.168.1.7", xff("203.0.113.9"), trusted) == "203.0.113.9"
    # a peer that is not a trusted proxy is the client, whatever it forwards
    assert client_address("198.51.100.5", xff("10.1.1.1"), trusted) == "198.51.100.5"
    assert client_address("10.1.2.3", {"x-real-ip": "203.0.113.8"}, trusted) == "203.0.113.8"
    assert client_address("10.1.2.3", xff("garbage, 203.0.113.7"), trusted) == "203.0.113.7"


def test_a_malformed_setting_names_the_bad_part():
    with pytest.raises(ValueError, match="'10.0.0.300'"):
        parse("10.0.0.0/8,10.0.0.300")


def test_uvicorn_believes_forwarded_headers_only_from_the_configured_cidrs():
    assert uvicorn_allow_ips("") == uvicorn_allow_ips("1") == ""
    assert uvicorn_allow_ips("10.0.0.0/8,192.168.1.7") == "10.0.0.0/8,192.168.1.7/32"


@pytest.mark.parametrize(
    ("env", "expected"),
    [({}, ""), ({"MARINA_TRUSTED_PROXIES": "2"}, ""), ({"MARINA_TRUSTED_PROXIES": "10.0.0.0/8"}, "10.0.0.0/8")],
)
def test_gunicorn_conf_sets_forwarded_allow_ips(env, expected):
    """Not gunicorn's default 127.0.0.1,::1: a local caller would pick its own address."""
    code = "import runpy,sys; print(repr(runpy.run_path(sys.argv[1]).get('forwarded_allow_ips')))"
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MARINA_TRUST", "FORWARDED_ALLOW_IPS"))}
    done = subprocess.run(
        [sys.executable, "-c", code, str(ROOT / "gunicorn.conf.py")],
        env={**clean, "MARINA_ENV_FILE": os.devnull, **env}, capture_output=True, text=True, cwd=ROOT, check=True,
    )
    assert done.stdout.strip() == repr(expected)
