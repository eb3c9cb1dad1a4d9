"""One local Ray for all the runs of a sweep or a replicate set.

A run on its own starts a private Ray and shuts it down at the end (Flower's simulation
shuts down the Ray it ran on). Runs that follow one another instead join one local Ray
head started once (:class:`~simulations.local_ray.LocalRayHead`), through ``RAY_ADDRESS``
as a run joins any cluster: each run then connects in well under a second instead of
paying Ray's start and shutdown, and the head goes when the sweep or the set ends (also
on Ctrl-C or an error).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

import torch

from panoramia_fl.simulations.experiment_config import (
    RAY_ADDRESS_ENV,
    ExperimentConfig,
    local_cpus,
    ray_address,
)
from panoramia_fl.simulations.local_ray import LocalRayHead


class SharedRay:
    """A local Ray head shared by the runs started inside :meth:`joined`.

    A run that names a cluster of its own (``ray.address`` or ``$RAY_ADDRESS``, e.g. the
    head of an enclosing sweep) joins that one. A run whose ``ray.num_cpus`` or
    ``ray.temp_dir`` differ from the head's gets a head of its own settings (the previous
    one stopped), as it would have got a Ray of its own.
    """

    def __init__(self) -> None:
        self._head: LocalRayHead | None = None
        self._settings: tuple[int, Path | None] | None = None

    @contextmanager
    def joined(self, config: ExperimentConfig) -> Iterator[None]:
        """Run ``config``'s run inside this block: it joins the shared head."""
        if ray_address(config):
            yield
            return
        settings = (local_cpus(config), config.ray.temp_dir)
        if self._head is None or settings != self._settings:
            self.close()
            head = LocalRayHead(
                num_cpus=settings[0], num_gpus=torch.cuda.device_count(), temp_dir=settings[1]
            )
            self._head = head.__enter__()
            self._settings = settings
        os.environ[RAY_ADDRESS_ENV] = self._head.address
        try:
            yield
        finally:
            os.environ.pop(RAY_ADDRESS_ENV, None)

    def close(self) -> None:
        """Stop the head (if any); a later :meth:`joined` starts another."""
        head, self._head, self._settings = self._head, None, None
        if head is not None:
            head.__exit__(None, None, None)

    def __enter__(self) -> SharedRay:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
