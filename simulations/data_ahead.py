"""A run's dataset, read once: by a thread beside Ray's start
(:func:`~simulations.ray_start.ray_started_ahead`'s ``ahead``), or where the run takes it
(:func:`~simulations.run_dir.prepare_run_dir`), whichever comes first; the run waits for a
read in progress and takes its value, or its error. ``functools.cache`` would not do: two
threads that miss at once both compute, and the cache keeps the value for the process's
life (the run's whole dataset, for the run's whole life).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeVar, cast

if TYPE_CHECKING:
    from panoramia_fl.ml.datasets import Dataset
    from panoramia_fl.simulations.experiment_config import ExperimentConfig

T = TypeVar("T")


class ComputedAhead(Generic[T]):
    """``compute()``'s value for one taker: computed once, ahead by any thread
    (:meth:`compute_ahead`) or by the taker (:meth:`take`), who then holds the only
    reference to it."""

    def __init__(self, compute: Callable[[], T]) -> None:
        self._compute: Callable[[], T] | None = compute
        self._lock = threading.Lock()
        self._value: T | None = None
        self._error: BaseException | None = None
        self._taken = False

    def compute_ahead(self) -> None:
        """Compute the value now, unless it was computed or taken; an error waits for the
        taker."""
        with self._lock:
            self._computed()

    def take(self) -> T:
        """The value (computed now, or waited for while another thread computes it), or its
        error raised; once."""
        with self._lock:
            if self._taken:
                raise RuntimeError("the value was taken already")
            self._computed()
            value, error = self._value, self._error
            self._value, self._error, self._taken = None, None, True
        if error is not None:
            raise error
        return cast(T, value)  # set, when no error was

    def _computed(self) -> None:
        if self._compute is None:
            return
        compute, self._compute = self._compute, None  # its closure freed once done
        try:
            self._value = compute()
        except BaseException as err:  # Ctrl-C too, on the taker's thread: it raises it
            self._error = err


def run_dataset_ahead(config: ExperimentConfig) -> ComputedAhead[Dataset]:
    """``config``'s dataset, as :func:`~simulations.run_dir.load_run_dataset` reads it."""

    def read() -> Dataset:
        # Imported here: the run directory's module imports torch, which Ray's start precedes.
        from panoramia_fl.simulations.run_dir import load_run_dataset

        return load_run_dataset(config)

    return ComputedAhead(read)
