"""The daily spend cap with the calls in flight held against it
(passthru/spendcap.py): each upstream call counts its estimated cost in its
process's lease (a row of passthru_spendhold: room reserved under the cap)
until its spend is recorded, on Marina in-process and its ledger (ten calls at once on a live one). The 50-concurrent case on real gunicorn servers (SQLite, and two
servers on one PostgreSQL) is tests/e2e/test_spend_cap_in_flight.py."""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest

from ledger.models import SpendDaily
from ledger.spend.selectors import utc_today
from passthru import spendcap
from passthru.models import SpendHold
from tests.conftest import MARINA_KEY
from tests.in_process import InProcessMarina
from tests.upstream import Reply, completion

MODEL = "openrouter/openai/gpt-5.2"  # priced by genai-prices' tables


def _body(max_tokens: int | None = 10, model: str = MODEL) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


def _call(marina: InProcessMarina, **kw: Any) -> httpx.Response:
    return marina.http.post(
        "/v1/chat/completions", json=_body(**kw), headers={"authorization": f"Bearer {MARINA_KEY}"}, timeout=10
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


class _AheadClock:
    """The cap's lease clock (spendcap.clock), which a test moves on instead of
    waiting out IDLE_SECONDS or RENEW_SECONDS: the real monotonic clock plus
    `ahead`, which only grows. What the leases then do is what a slower
    machine would see; the rows' times (time.time()) stay real."""

    def __init__(self) -> None:
        self.ahead = 0.0
        self.stopped: float | None = None

    def __call__(self) -> float:
        return self.stopped if self.stopped is not None else time.monotonic() + self.ahead

    @contextlib.contextmanager
    def still(self) -> Iterator[None]:
        """Stopped meanwhile: no lease turns idle or due for renewal however
        slow the machine is between two steps of a case."""
        self.stopped = self()
        try:
            yield
        finally:
            self.stopped = None


_clock = _AheadClock()


@pytest.fixture(autouse=True)
def _lease_clock(monkeypatch):
    monkeypatch.setattr(spendcap, "clock", _clock)  # the leases are dropped between cases (marina)
    _clock.stopped = None
    return _clock


def _wait_until_no_holds() -> None:
    """Until every lease is given back (idle for IDLE_SECONDS on the lease clock)."""
    deadline = time.monotonic() + 10  # only a bound for a release that never comes
    while SpendHold.objects.exists() and time.monotonic() < deadline:
        _clock.ahead += spendcap.TICK_SECONDS  # the ticker looks every TICK_SECONDS: a tick's wait, not a second's
        time.sleep(0.01)
    assert not SpendHold.objects.exists(), list(SpendHold.objects.values())


def test_the_estimate_uses_the_prompt_size_the_price_and_max_tokens(settings):
    settings.MARINA_SPEND_CAP_COMPLETION_TOKENS = 1000
    # openai/gpt-5.2 on OpenRouter in genai-prices: $1.75 per million prompt tokens, $14 per million completion tokens.
    prompt, completion_ = spendcap._rates("openrouter", "openai/gpt-5.2") or (0, 0)
    assert (prompt, completion_) == (1750.0, 14000.0)  # nano-dollars per token
    assert spendcap.estimate_nanousd("openrouter", "openai/gpt-5.2", {"max_tokens": 100}, 4000) == 1000 * 1750 + 100 * 14000
    assert spendcap.estimate_nanousd("openrouter", "openai/gpt-5.2", {"max_completion_tokens": 7, "max_tokens": 100}, 1) == 1750 + 7 * 14000
    assert spendcap.estimate_nanousd("openrouter", "openai/gpt-5.2", {}, 4) == 1750 + 1000 * 14000  # the default completion
    assert spendcap.estimate_nanousd("openrouter", "openai/gpt-5.2", {"max_tokens": 10, "n": 3}, 4) == 1750 + 30 * 14000
    assert spendcap.estimate_nanousd("openrouter", "openai/gpt-5.2", {"max_tokens": True}, 4) == 1750 + 1000 * 14000
    # A model nobody prices is held at nothing.
    assert spendcap.estimate_nanousd("openrouter", "scripted-model", {"max_tokens": 100}, 4000) == 0


def test_own_calls_count_at_once_and_the_refusal_states_the_figures(marina, settings, priced):
    settings.MARINA_DAILY_SPEND_CAP_USD = Decimal("0.0025")
    statuses = [_call(marina).status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    assert len(priced.requests) == 3
    blocked = _call(marina).json()["error"]
    assert blocked["code"] == "spend_cap_reached"
    assert "$0.00300000 spent today (UTC) and $0.00000000 held by 0 calls in flight, of $0.0025" in blocked["message"]
    _wait_until_no_holds()  # every call's hold was released once its spend was recorded


def test_spend_elsewhere_counts_once_the_lease_is_sized_again(marina, settings, priced):
    """Another host spends within the room its own lease reserved, so this
    process's lease stays good until it is used up or given back; sized
    again (here: after being given back idle), it counts that spend."""
    settings.MARINA_DAILY_SPEND_CAP_USD = Decimal("1")
    assert _call(marina).status_code == 200
    _wait_until_no_holds()
    _other_host_spent("1")
    assert _call(marina).status_code == 429


def test_calls_in_flight_elsewhere_count_and_a_dead_processs_holds_expire(marina, settings, priced):
    """Another host's lease (its calls in flight) holds $0.99 of a $1 cap: no
    room for a call estimated at $0.014 (1000 completion tokens at $14/M). A
    lease not renewed for LEASE_STALE_SECONDS (its process died) no longer counts."""
    settings.MARINA_DAILY_SPEND_CAP_USD = Decimal("1")
    hold = SpendHold.objects.create(id=42, day=utc_today(), nanousd=990_000_000, created_at=time.time())
    response = _call(marina, max_tokens=1000)
    assert response.status_code == 429
    message = response.json()["error"]["message"]
    assert "$0.00000000 spent today (UTC) and $0.99000000 held by 1 call in flight, of $1" in message
    assert len(priced.requests) == 0
    hold.created_at = time.time() - spendcap.LEASE_STALE_SECONDS - 1
    hold.save()
    assert _call(marina, max_tokens=1000).status_code == 200


def test_concurrent_calls_stop_at_the_cap_not_past_it(marina_url, settings, upstream):
    """Ten calls at once, each estimated (and costing) about a cent, under a
    cap with room for three: three run, seven are refused before any upstream
    call, and spend stays within the cap."""
    upstream.handler = lambda body: Reply(json=completion("ok", prompt_tokens=10, completion_tokens=700), delay=0.3)

    async def go() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=marina_url, headers={"authorization": f"Bearer {MARINA_KEY}"}, timeout=20) as client:
            return list(await asyncio.gather(*(client.post("/v1/chat/completions", json=_body(700)) for _ in range(10))))

    # 700 completion tokens at $14/M = $0.0098, plus the prompt: a cap of three such calls and a bit.
    settings.MARINA_DAILY_SPEND_CAP_USD = Decimal("0.0300")
    responses = asyncio.run(go())
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] * 3 + [429] * 7, statuses
    assert len(upstream.requests) == 3
    body_estimate = spendcap.estimate_nanousd("openrouter", "openai/gpt-5.2", upstream.requests[0].body, len(upstream.requests[0].raw))
    assert 3 * body_estimate <= 30_000_000 < 4 * body_estimate
    spent = sum(row.cost_nanousd for row in SpendDaily.objects.all())
    assert spent <= 30_000_000
    refused = next(r for r in responses if r.status_code == 429).json()["error"]["message"]
    assert "call" in refused and "in flight" in refused
    _wait_until_no_holds()


def test_an_unpriced_model_runs_while_something_is_left(marina, settings, upstream):
    """No price known: held at nothing, so it runs while spend is under the
    cap, and counts when the provider reports its cost."""
    upstream.handler = lambda body: Reply(json=completion("ok", cost=0.4))
    settings.MARINA_DAILY_SPEND_CAP_USD = Decimal("1")
    model = "openrouter/scripted-model"
    assert [_call(marina, model=model).status_code for _ in range(4)] == [200, 200, 200, 429]


def test_a_ledger_that_cannot_be_read_refuses_calls_unless_told_to_allow(marina, settings, priced, monkeypatch, caplog):
    """Fail closed (issue 24): a cap that cannot say there is room refuses,
    503 spend_cap_unavailable with Retry-After; MARINA_SPEND_CAP_ON_DB_ERROR=allow
    lets the call through uncounted, as before. Either way it is logged."""
    from django.db import OperationalError

    def down(asks: Any, book: Any) -> Any:
        raise OperationalError("the database is down")

    settings.MARINA_DAILY_SPEND_CAP_USD = Decimal("1")
    monkeypatch.setattr(spendcap, "settle", down)
    refused = _call(marina)
    assert refused.status_code == 503 and refused.headers["retry-after"] == "2"
    assert refused.json()["error"]["code"] == "spend_cap_unavailable"
    assert "MARINA_SPEND_CAP_ON_DB_ERROR=allow" in refused.json()["error"]["message"]
    assert "spend cap not checked" in caplog.text
    settings.MARINA_SPEND_CAP_ON_DB_ERROR = "allow"
    assert _call(marina).status_code == 200


def test_a_call_served_from_the_lease_makes_no_database_round_trip(marina, settings, priced, monkeypatch):
    """The first call sizes this process's lease (one transaction on the cap
    thread): its estimate and a chunk, 1 % of the cap here. The next calls fit
    in it and start without the database: no transaction, the row unchanged."""
    settings.MARINA_DAILY_SPEND_CAP_USD = Decimal("1")
    sized: list[int] = []
    real = spendcap.settle
    monkeypatch.setattr(spendcap, "settle", lambda asks, book: sized.append(len(asks)) or real(asks, book))
    assert _call(marina).status_code == 200
    assert sized == [1]
    estimate = spendcap.estimate_nanousd("openrouter", "openai/gpt-5.2", priced.requests[0].body, len(priced.requests[0].raw))
    lease = SpendHold.objects.get()
    # Sized at the estimate and the chunk; the ticker (every 0.25 s) may already have
    # brought the row down to the room left, i.e. less what the first call spent.
    spent = sum(SpendDaily.objects.values_list("cost_nanousd", flat=True))
    assert spent > 0
    assert lease.nanousd in (estimate + 10_000_000, estimate + 10_000_000 - spent)
    assert [_call(marina).status_code for _ in range(5)] == [200] * 5
    assert len(priced.requests) == 6
    assert sized == [1]
    assert SpendHold.objects.get().nanousd <= lease.nanousd  # only brought down to what is left (by the ticker)


def _ask(book: spendcap.Book, estimate: int, cap: int) -> tuple[bool, spendcap.Figures]:
    """Another process's check, sizing its lease through the same locked transaction (on this thread's connection)."""
    return spendcap.settle([spendcap._Ask(utc_today(), estimate, cap, concurrent.futures.Future())], book)[0]


def _leased() -> int:
    return sum(SpendHold.objects.values_list("nanousd", flat=True))


def _settled_row() -> int:
    """This server's lease row once the ticker has written its room left
    (size less the spend recorded since it was sized), which it keeps while
    the lease clock stands still and no call runs."""
    deadline = time.monotonic() + 10  # only a bound for a ticker that never comes
    while time.monotonic() < deadline:
        with spendcap._book.lock:
            (lease,) = spendcap._book.leases.values()
            settled = lease.row and lease.published == lease.size - lease.recorded
        if settled and SpendHold.objects.filter(id=lease.id, nanousd=lease.published).exists():
            return lease.published
        time.sleep(0.01)
    raise AssertionError(f"the lease row was not brought to its room left: {lease}")


def test_two_processes_leases_never_exceed_the_cap(marina, settings, upstream):
    """Another process (a second Book, through the same locked transaction)
    and this server lease room together: each lease is sized within what the
    other left, near the cap to its calls in flight only, and this server's
    calls stop once its lease is used up: spent + leased never passes the cap.
    The lease clock stands still (on a loaded machine a second between two
    steps would give this server's idle lease back, and its room with it), and
    the figures are read once the ticker has brought this server's row down to
    its room left (else room appears between the reading and the ask)."""
    upstream.handler = lambda body: Reply(json=completion("ok", cost=0.01))
    settings.MARINA_DAILY_SPEND_CAP_USD = Decimal("1")
    with _clock.still():
        _two_processes_lease(marina, upstream)


def _two_processes_lease(marina: InProcessMarina, upstream: Any) -> None:
    cap = 1_000_000_000
    other = spendcap.Book()
    assert _ask(other, 10_000_000, cap)[0]
    assert _leased() == 90_000_000  # its call and a chunk of 8 like it: the cap is far
    assert _call(marina, max_tokens=700).status_code == 200  # about $0.0098
    spent = sum(row.cost_nanousd for row in SpendDaily.objects.all())
    ours = _settled_row()
    assert ours > 8 * 9_800_000 - spent  # a chunk too, less the call's spend
    free = cap - spent - _leased()
    assert _ask(other, free, cap)[0]  # the other takes all that is free, and no chunk beyond
    assert SpendHold.objects.filter(nanousd=10_000_000 + free).exists()
    assert SpendHold.objects.filter(nanousd=ours).exists()  # this server's room untouched
    free = cap - spent - _leased()  # its own chunk, given back
    assert spent + _leased() + free == cap and free > 0
    taken, figures = _ask(other, free + 1, cap)  # more than is free
    assert not taken and figures.spent == spent
    statuses = [_call(marina, max_tokens=700).status_code for _ in range(30)]
    assert 429 in statuses  # its lease used up, and no more room beside the other's
    spent = sum(row.cost_nanousd for row in SpendDaily.objects.all())
    assert spent == 10_000_000 * len(upstream.requests)
    assert spent + _leased() <= cap


def test_an_idle_lease_is_given_back(marina, settings, priced):
    """A lease keeps room beyond its calls; IDLE_SECONDS after its last call
    ends it is given back (its row deleted), so an idle worker blocks no one."""
    settings.MARINA_DAILY_SPEND_CAP_USD = Decimal("1")
    assert _call(marina).status_code == 200
    # Sized with a chunk of 1 % of the cap beyond the call; the ticker (every
    # 0.25 s) may already have brought the row down to the room left, the
    # chunk less what the call spent: still room beyond the calls in flight (none).
    spent = sum(SpendDaily.objects.values_list("cost_nanousd", flat=True))
    assert spent == 1_000_000
    assert SpendHold.objects.get().nanousd >= 10_000_000 - spent
    _wait_until_no_holds()
    assert _call(marina).status_code == 200  # and sized again on the next call
    assert SpendHold.objects.exists()


def test_a_lease_with_calls_in_flight_is_renewed(marina, settings, upstream):
    """A call in flight longer than RENEW_SECONDS: its process renews its
    lease row meanwhile (others stop counting rows not renewed for
    LEASE_STALE_SECONDS)."""
    upstream.handler = lambda body: Reply(json=completion("ok", cost=0.001), delay=1.5)
    settings.MARINA_DAILY_SPEND_CAP_USD = Decimal("1")
    answer: list[int] = []
    call = threading.Thread(target=lambda: answer.append(_call(marina).status_code))
    call.start()
    deadline = time.monotonic() + 10  # only bounds for a row or renewal that never comes
    while not SpendHold.objects.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    first = SpendHold.objects.get().created_at
    _clock.ahead += spendcap.RENEW_SECONDS  # renewal is due: the next tick renews the row
    while SpendHold.objects.get().created_at == first and time.monotonic() < deadline:
        time.sleep(0.05)
    renewed = SpendHold.objects.get().created_at
    assert call.is_alive()  # still in flight
    assert first < renewed
    call.join()
    assert answer == [200]
