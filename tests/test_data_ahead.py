"""``simulations.data_ahead``: a run's data, read by whichever thread asks first."""

from __future__ import annotations

import threading

import pytest

from panoramia_fl.ml.datasets import DataError
from panoramia_fl.simulations.data_ahead import ComputedOnce


def _asked_from_two_threads(compute) -> tuple[ComputedOnce, list, threading.Event]:
    """``compute`` behind a :class:`ComputedOnce` that a thread asks for first; the caller
    asks second, while that thread computes (``started`` set, ``release`` not yet)."""
    started, release = threading.Event(), threading.Event()

    def held():
        started.set()
        assert release.wait(timeout=30)
        return compute()

    once = ComputedOnce(held)
    seen: list = []

    def first():
        try:
            seen.append(once())
        except DataError as err:
            seen.append(err)

    thread = threading.Thread(target=first)
    thread.start()
    assert started.wait(timeout=30)
    threading.Timer(0.2, release.set).start()  # the second asks meanwhile, and waits
    return once, [thread, seen], release


def test_the_value_is_computed_once_and_a_caller_meanwhile_waits_for_it():
    computed = []

    def read():
        computed.append(object())
        return computed[-1]

    once, (thread, seen), release = _asked_from_two_threads(read)
    mine = once()
    thread.join(timeout=30)
    assert release.is_set() and len(computed) == 1
    assert seen == [mine] and mine is computed[0]
    assert once() is mine


def test_an_error_is_raised_to_every_caller_and_not_computed_again():
    calls = []

    def read():
        calls.append(1)
        raise DataError("missing data file: /nowhere/train-images-idx3-ubyte.gz")

    once, (thread, seen), _ = _asked_from_two_threads(read)
    with pytest.raises(DataError, match="missing data file: /nowhere") as raised:
        once()
    thread.join(timeout=30)
    assert seen == [raised.value] and calls == [1]
    with pytest.raises(DataError):
        once()
    assert calls == [1]
