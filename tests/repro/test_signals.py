"""repro/runner.py: SIGTERM and Ctrl-C end an experiment as exceptions raised
only while the kit waits; one that comes while it works on the ledger is held
until its next wait. Real signals, sent to this process."""
from __future__ import annotations

import os
import signal
import time

import pytest

from repro.runner import Terminated, raise_held, signals_as_exceptions, stoppable


@pytest.mark.parametrize(("signum", "raised"), [(signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)])
def test_a_signal_ends_a_wait_at_once(signum, raised):
    with signals_as_exceptions(), pytest.raises(raised), stoppable():
        os.kill(os.getpid(), signum)
        time.sleep(5)  # ended by the signal, not waited out
        pytest.fail("the wait went on after the signal")


def test_a_signal_outside_a_wait_is_held_until_the_next_one():
    with signals_as_exceptions():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # the handler has run: nothing was raised here, in the middle of the work
        with pytest.raises(Terminated), stoppable():
            pytest.fail("a held signal must end the wait before it begins")
        raise_held()  # raised once, not again


def test_a_held_signal_stops_the_next_run_before_it_starts():
    with signals_as_exceptions():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        with pytest.raises(KeyboardInterrupt):
            raise_held()


def test_the_handlers_are_put_back_and_a_signal_held_at_the_end_is_dropped():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with signals_as_exceptions():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    raise_held()  # the experiment had ended: nothing is left to raise
