"""Flower's Simulation Engine stopped in the middle of a round (Ctrl-C, SIGTERM) without Ray
ending the process first.

Interrupted, the engine (``vce_api.run_api``) sets its stop event and terminates its Ray
backend at once (``ray.shutdown``), while its worker threads may still wait on a site
actor's reply:

- a wait whose actor lives on (SIGTERM reaches the run's process alone) never returns once
  Ray is shut down: the thread is left behind, blocked for good;
- a wait whose actor ended too (Ctrl-C reaches every process of the terminal's group)
  returns, and the thread drops Ray's object reference as it unwinds. Dropped while the
  shutdown is under way, the reference reaches Ray's core worker after it was shut down, and
  Ray ends the whole process with status 1 ("The core worker has already been shutdown"):
  the run ended with 1 instead of 130, without saying how to continue.

The engine's own wait for those threads cannot be relied on either: on Python 3.11 a
``Thread.join`` that a signal interrupts marks the thread as ended though it runs on.

So the engines started meanwhile (:func:`site_calls_ended_first`) count their worker
threads' loops, and build a backend that, stopped with loops still running, first kills the
site actors they may wait on (each call then fails at once, as a call to a dead actor does),
waits for the loops to end, and only then terminates as Flower's does. A simulation that
ends by itself has no loop running by then: its end is Flower's, unchanged.

This module loads Flower's engine: import it where a simulation starts.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from queue import Queue
from typing import Any, cast

import ray
from flwr.app import Message
from flwr.clientapp import ClientApp
from flwr.server.superlink.fleet.vce import vce_api
from flwr.server.superlink.fleet.vce.backend import BackendConfig, raybackend
from ray.actor import ActorHandle

from panoramia_fl.simulations.swapped import swapped

log = logging.getLogger(__name__)

LOOPS_END_WAIT_S = 30.0
"""How long a stopped backend waits for the engine's worker loops once their actors are
killed (each call then fails within milliseconds, and a loop sees the engine's stop within
``engine_waits.ENGINE_POLL_S``); past it, Ray is shut down all the same."""


class CallsFirstRayBackend(raybackend.RayBackend):
    """Flower's Ray backend, whose :meth:`terminate` waits for the engine's worker loops
    (:meth:`worker_loop`) to end, their site actors killed first."""

    def __init__(self, backend_config: BackendConfig) -> None:
        super().__init__(backend_config)
        self._actors: list[ActorHandle[Any]] = []
        self._loops = 0
        self._loop_ended = threading.Condition()

    def build(self, app_fn: Callable[[], ClientApp]) -> None:
        super().build(app_fn)
        assert self.pool is not None  # built by Flower's build
        # Every actor (none is busy before the first call): handles, though Flower's pool
        # types them as the actor's class.
        self._actors = cast("list[ActorHandle[Any]]", list(self.pool.pool))

    @contextmanager
    def worker_loop(self) -> Iterator[None]:
        """One of the engine's worker threads runs its loop meanwhile (the loop's frames,
        and the object references they held, are gone when the block ends)."""
        with self._loop_ended:
            self._loops += 1
        try:
            yield
        finally:
            with self._loop_ended:
                self._loops -= 1
                self._loop_ended.notify_all()

    def terminate(self) -> None:
        """Flower's terminate, once the engine's worker loops have ended: with loops still
        running (the engine stopped in the middle), their actors are killed first."""
        with self._loop_ended:
            running = self._loops
        if running:
            for actor in self._actors:
                ray.kill(actor, no_restart=True)
            with self._loop_ended:
                if not self._loop_ended.wait_for(lambda: not self._loops, LOOPS_END_WAIT_S):
                    left = self._loops
                    log.warning("%d of the engine's loops did not end before Ray's shutdown", left)
            # Whatever the loops left in reference cycles (a failed call's traceback, its
            # frames and their object references) goes now, while Ray runs: not mid-shutdown,
            # in whichever thread's allocation happens to start a collection.
            gc.collect()
        super().terminate()


@contextmanager
def site_calls_ended_first() -> Iterator[None]:
    """The Simulation Engines started meanwhile build a :class:`CallsFirstRayBackend`
    (``vce_api.start_vce`` looks Flower's class up as it builds its backend) and run each
    worker loop of ``vce_api`` inside the backend's :meth:`~CallsFirstRayBackend.worker_loop`.
    The modules are as they were afterwards."""
    engine_loop = vce_api.worker

    def counted_loop(
        messageins_queue: Queue[Message],
        messageres_queue: Queue[Message],
        node_info_store: dict[int, vce_api.DeprecatedRunInfoStore],
        backend: vce_api.Backend,
        f_stop: threading.Event,
        metrics: vce_api.VceMetrics,
    ) -> None:
        # An engine started before the swap has Flower's backend: its loops are not counted.
        counted = backend.worker_loop() if isinstance(backend, CallsFirstRayBackend) else None
        with counted or contextlib.nullcontext():
            engine_loop(
                messageins_queue, messageres_queue, node_info_store, backend, f_stop, metrics
            )

    with (
        swapped(raybackend, RayBackend=CallsFirstRayBackend),
        swapped(vce_api, worker=counted_loop),
    ):
        yield
