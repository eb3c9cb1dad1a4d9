"""Flower's Simulation Engine without its idle waits: it hands a message to its site as
soon as the ServerApp sends it, and ends as soon as its ServerApp has.

Two of the engine's threads poll (``flwr.server.superlink.fleet.vce.vce_api``, which has
no option for either wait):

- the thread that takes the ServerApp's messages from the link's state for the sites looks
  every 0.1 s, so each message waited 0.05 s on average before it left: each round's
  instructions, and each audit's;
- the threads that hand messages to the site actors and take their replies see the engine's
  stop only when a wait on their queue times out, after up to a second: every simulation
  went on 0.5-1 s after its last reply, the machine idle.

So, as :mod:`simulations.ray_start` does for Ray's processes, :func:`prompt_engine` goes
through that module (:func:`~simulations.swapped.swapped`): the first
thread is also woken by every message the ServerApp stores, and the queues' timed waits
last at most :data:`ENGINE_POLL_S`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from queue import Queue
from typing import TYPE_CHECKING, Any

from panoramia_fl.simulations.swapped import swapped

if TYPE_CHECKING:
    from flwr.app import Message
    from flwr.server.superlink.linkstate import LinkState

ENGINE_POLL_S = 0.1
"""The longest a thread of the engine waits before it looks at the stop event again (and
the message-taking thread at the link's state). A message put on a queue, or stored for a
site, still wakes its thread at once: the poll only bounds how late the stop is seen (ten
wake-ups a second for each idle thread, nothing a run can measure)."""


class _PolledQueue(Queue[Any]):
    """A queue whose timed waits last at most :data:`ENGINE_POLL_S` (a get that would wait
    longer raises ``queue.Empty`` sooner, as the engine's loops expect of a timeout)."""

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if block and timeout is not None:
            timeout = min(timeout, ENGINE_POLL_S)
        return super().get(block, timeout)


def _hand_messages_when_stored(
    state: LinkState,
    queue: Queue[Message],
    nodes_mapping: Mapping[int, int],
    f_stop: threading.Event,
) -> None:
    """The engine's message-taking thread: each site's next message from ``state`` onto
    ``queue``, one per site a pass (as Flower's), a pass each time the ServerApp stores a
    message, and at least every :data:`ENGINE_POLL_S` until ``f_stop``."""
    stored = threading.Event()
    store: Callable[[Message], Any] = state.store_message_ins

    def store_and_wake(message: Message) -> Any:
        try:
            return store(message)
        finally:
            stored.set()  # after the message is in: a pass that follows finds it

    # The state is this simulation's own (one per run_simulation): wrapped while it runs.
    state.store_message_ins = store_and_wake  # type: ignore[method-assign]  # this one's only
    try:
        while not f_stop.is_set():
            stored.clear()  # a message stored from here on wakes the wait below at once
            for node_id in nodes_mapping:
                for message in state.get_message_ins(node_id=node_id, limit=1):
                    queue.put(message)
            stored.wait(ENGINE_POLL_S)
    finally:
        del state.store_message_ins  # the class's method again


@contextmanager
def prompt_engine() -> Iterator[None]:
    """The Simulation Engines started meanwhile take each message the ServerApp stores at
    once (their message-taking thread is :func:`_hand_messages_when_stored`) and see their
    stop within :data:`ENGINE_POLL_S` (their queues are :class:`_PolledQueue`; ``vce_api``
    builds both in ``run_api``). The module is as it was afterwards."""
    from flwr.server.superlink.fleet.vce import vce_api

    with swapped(vce_api, Queue=_PolledQueue, add_messages_to_queue=_hand_messages_when_stored):
        yield
