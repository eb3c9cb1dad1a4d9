"""Flower's Simulation Engine ending as soon as its ServerApp has.

When the ServerApp's thread returns, Flower sets the engine's stop event, and each of the
engine's threads that hand messages to the site actors and take their replies sees it the
next time a wait on its queue times out: after up to a second (``queue.get(timeout=1.0)`` in
``flwr.server.superlink.fleet.vce.vce_api``). Every simulation, a run's training and its
audits alike, ended 0.5-1 s after its last reply, the machine idle. Flower has no option for
that wait, so, as :mod:`simulations.ray_start` does for Ray's processes, this goes through
the module that builds those queues (Flower pins its version in the project's
dependencies).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from queue import Queue
from typing import Any

ENGINE_POLL_S = 0.1
"""The longest a thread of the engine waits on its queue before it looks at the stop event
again. A message put on a queue still wakes its thread at once: the poll only bounds how late
the stop is seen (ten wake-ups a second for each idle thread, nothing a run can measure)."""


class _PolledQueue(Queue[Any]):
    """A queue whose timed waits last at most :data:`ENGINE_POLL_S` (a get that would wait
    longer raises ``queue.Empty`` sooner, as the engine's loops expect of a timeout)."""

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if block and timeout is not None:
            timeout = min(timeout, ENGINE_POLL_S)
        return super().get(block, timeout)


@contextmanager
def prompt_engine_stop() -> Iterator[None]:
    """The Simulation Engines started meanwhile see their stop within :data:`ENGINE_POLL_S`:
    their message queues are :class:`_PolledQueue` (``vce_api`` builds them in ``run_api``).
    The module is as it was afterwards."""
    from flwr.server.superlink.fleet.vce import vce_api

    built_by_engine = vce_api.Queue
    if built_by_engine is _PolledQueue:  # inside another one: that one puts it back
        yield
        return
    vce_api.Queue = _PolledQueue  # type: ignore[misc]  # a class the module builds, swapped
    try:
        yield
    finally:
        vce_api.Queue = built_by_engine  # type: ignore[misc]  # and put back
