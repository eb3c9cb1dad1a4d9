"""A run's dataset, read once: by a thread beside Ray's start
(:func:`~simulations.ray_start.ray_started_ahead`'s ``ahead``), or where the run asks for it
(:func:`~simulations.run_dir.prepare_run_dir`), whichever comes first; the other waits for
it and takes its value, or its error. ``functools.cache`` would not do: two threads that
miss at once both compute.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar, cast

if TYPE_CHECKING:
    from panoramia_fl.ml.datasets import Dataset
    from panoramia_fl.simulations.experiment_config import ExperimentConfig

T = TypeVar("T")


class ComputedOnce(Generic[T]):
    """``compute()``'s value, computed at the first call from any thread. Every call returns
    that value or raises its error again; a call made meanwhile waits for it."""

    def __init__(self, compute: Callable[[], T]) -> None:
        self._compute: Callable[[], T] | None = compute
        self._lock = threading.Lock()
        self._value: T | None = None
        self._error: BaseException | None = None

    def __call__(self) -> T:
        with self._lock:
            if self._compute is not None:
                compute, self._compute = self._compute, None  # its closure freed once done
                try:
                    self._value = compute()
                except BaseException as err:  # Ctrl-C too: the caller that asks next sees it
                    self._error = err
        if self._error is not None:
            raise self._error
        return cast(T, self._value)  # set, when no error was


def run_dataset_once(config: ExperimentConfig) -> ComputedOnce[Dataset]:
    """``config``'s dataset (:func:`~simulations.run_dir.load_run_dataset`), read at the
    first call."""

    def read() -> Dataset:
        # Imported here: the run directory's module imports torch, which Ray's start precedes.
        from panoramia_fl.simulations.run_dir import load_run_dataset

        return load_run_dataset(config)

    return ComputedOnce(read)
