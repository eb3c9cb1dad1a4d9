"""``simulations.data_ahead``: a run's data, read once, by a thread ahead or by the run."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest

from panoramia_fl.ml.datasets import DataError
from panoramia_fl.simulations.data_ahead import ComputedAhead


class Value:
    """A value a weak reference can follow (a dataset, in a run)."""


def _computing_ahead(compute) -> tuple[ComputedAhead, threading.Thread]:
    """``compute`` behind a :class:`ComputedAhead` that a thread computes ahead, and is
    still computing when this returns (the taker then waits for it)."""
    started, release = threading.Event(), threading.Event()

    def held():
        started.set()
        assert release.wait(timeout=30)
        return compute()

    ahead = ComputedAhead(held)
    thread = threading.Thread(target=ahead.compute_ahead)
    thread.start()
    assert started.wait(timeout=30)
    threading.Timer(0.2, release.set).start()  # the taker asks meanwhile, and waits
    return ahead, thread


def test_the_taker_waits_for_the_value_computed_ahead_and_holds_it_alone():
    computed: list[weakref.ref] = []

    def read():
        value = Value()
        computed.append(weakref.ref(value))
        return value

    ahead, thread = _computing_ahead(read)
    value = ahead.take()
    thread.join(timeout=30)
    assert len(computed) == 1 and computed[0]() is value
    ahead.compute_ahead()  # taken: not computed again
    assert len(computed) == 1
    del value
    gc.collect()
    assert computed[0]() is None  # the run's dataset is freed once the run lets it go
    with pytest.raises(RuntimeError, match="taken already"):
        ahead.take()


def test_an_error_computed_ahead_is_raised_to_the_taker_and_not_computed_again():
    calls = []

    def read():
        calls.append(1)
        raise DataError("missing data file: /nowhere/train-images-idx3-ubyte.gz")

    ahead, thread = _computing_ahead(read)
    with pytest.raises(DataError, match="missing data file: /nowhere"):
        ahead.take()
    thread.join(timeout=30)
    assert calls == [1]


def test_a_value_nobody_computed_ahead_is_computed_by_the_taker():
    assert ComputedAhead(lambda: 7).take() == 7
