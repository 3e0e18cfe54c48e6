"""The daily spend cap: exact within a process, and other processes' spend
counted within MARINA_SPEND_CAP_REFRESH_SECONDS (passthru/spendcap.py)."""
from __future__ import annotations

import dataclasses
import time
from decimal import Decimal

import httpx
import pytest

from ledger.models import SpendDaily
from ledger.spend.selectors import utc_today
from tests.conftest import MARINA_KEY
from tests.upstream import Reply, completion


def _call(marina_url: str) -> httpx.Response:
    return httpx.post(
        f"{marina_url}/v1/chat/completions",
        json={"model": "openrouter/openai/gpt-5.2", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {MARINA_KEY}"},
        timeout=10,
    )


@pytest.fixture
def priced(upstream):
    """Every upstream reply reports a cost of $0.001."""
    upstream.handler = lambda body: Reply(json=completion("ok", cost=0.001))
    return upstream


def _other_host_spent(dollars: str) -> None:
    SpendDaily.objects.create(
        day=utc_today(), key_name="elsewhere", requested_model="m", provider="p", upstream_model="m",
        calls=1, cost_nanousd=int(Decimal(dollars) * 10**9),
    )


@pytest.mark.parametrize("refresh", [0, 60])
def test_own_calls_count_at_once(marina_url, settings, priced, refresh):
    """With a 60 s snapshot, the process's own recorded calls still stop it at the cap."""
    settings.MARINA_DAILY_SPEND_CAP_USD = Decimal("0.0025")
    settings.MARINA_SPEND_CAP_REFRESH_SECONDS = refresh
    statuses = [_call(marina_url).status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    assert len(priced.requests) == 3
    blocked = _call(marina_url).json()["error"]
    assert blocked["code"] == "spend_cap_reached" and "$0.00300000 of $0.0025" in blocked["message"]


def test_spend_elsewhere_counts_at_once_with_refresh_zero(marina_url, settings, priced):
    settings.MARINA_DAILY_SPEND_CAP_USD = Decimal("1")
    assert _call(marina_url).status_code == 200
    _other_host_spent("1")
    assert _call(marina_url).status_code == 429


def test_spend_elsewhere_counts_within_the_refresh_interval(marina_url, settings, priced):
    """No clock in the test: the snapshot is aged past the interval by hand,
    and the test waits for the background read, not for a time."""
    from passthru import spendcap

    settings.MARINA_DAILY_SPEND_CAP_USD = Decimal("1")
    settings.MARINA_SPEND_CAP_REFRESH_SECONDS = 60
    assert _call(marina_url).status_code == 200  # first call: a fresh read
    _other_host_spent("1")
    assert _call(marina_url).status_code == 200  # the snapshot is still young: the documented overshoot
    young = spendcap._snapshot
    assert young is not None
    aged = spendcap._snapshot = dataclasses.replace(young, read_at=young.read_at - 61)
    # The first call past the interval starts a background read and goes on
    # with the old figure; the calls after that read see the other host's spend.
    assert _call(marina_url).status_code == 200
    deadline = time.monotonic() + 10  # only a bound for a read that never ends
    while spendcap._snapshot is aged and time.monotonic() < deadline:
        time.sleep(0.01)
    assert spendcap._snapshot is not aged, "the background read never replaced the snapshot"
    assert _call(marina_url).status_code == 429


def test_a_new_day_reads_afresh(marina_url, settings, priced):
    """A snapshot from another day is never used."""
    from passthru import spendcap

    settings.MARINA_DAILY_SPEND_CAP_USD = Decimal("1")
    settings.MARINA_SPEND_CAP_REFRESH_SECONDS = 60
    assert _call(marina_url).status_code == 200
    snap = spendcap._snapshot
    assert snap is not None and snap.day == utc_today()
    spendcap._snapshot = spendcap.Snapshot(snap.day.replace(year=2000), 0, 0, time.monotonic())
    _other_host_spent("1")
    assert _call(marina_url).status_code == 429
