"""Wall-clock time per audit stage."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class StageTimer:
    """Accumulates seconds per named stage (a stage may run several times)."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}
        self.start = time.perf_counter()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - start

    def total(self) -> dict[str, float]:
        """The stages and the total since the timer was made."""
        return {**self.timings, "total": time.perf_counter() - self.start}

    def branch(self, elapsed: float) -> StageTimer:
        """A timer holding this one's stages that counts ``elapsed`` seconds already spent:
        each of several audits sharing one preparation counts it and its own stages."""
        branch = StageTimer()
        branch.timings = dict(self.timings)
        branch.start = time.perf_counter() - elapsed
        return branch
