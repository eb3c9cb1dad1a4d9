"""Stopping the ServerApp on request (Ctrl-C, SIGTERM in the harness).

In a simulation the ServerApp runs in a thread of its own that waits on its grid for
replies (up to ``ServerSettings.timeout_s``); a signal reaches the main thread only. A
:class:`StopSwitch` lets the harness end that thread: every grid call after
:meth:`StopSwitch.stop` raises :class:`RunStopped`, and the round in progress is abandoned
before it writes anything. :func:`stop_on_signals` sets the switch the moment a signal
arrives, before Flower reacts to it by ending the site processes: a site whose audit was
cut short that way is left to ``--resume``, not recorded as failed.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.run import Run


class RunStopped(Exception):
    """The harness asked the ServerApp to stop; the round in progress is abandoned."""


@dataclass
class StopSwitch:
    """One simulation's stop request, and the ServerApp thread it stops."""

    requested: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    """The thread running the ServerApp's ``main``, once it started."""

    def check(self) -> None:
        """Raise :class:`RunStopped` once a stop was requested."""
        if self.requested.is_set():
            raise RunStopped("stop requested")

    def stop(self, timeout: float) -> bool:
        """Request the stop and wait up to ``timeout`` s for the ServerApp's thread to end;
        True when it did (or never started)."""
        self.requested.set()
        if self.thread is None or self.thread is threading.current_thread():
            return True
        self.thread.join(timeout)
        return not self.thread.is_alive()


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stop_on_signals(switch: StopSwitch) -> Iterator[None]:
    """While the harness waits on a simulation: SIGINT and SIGTERM request ``switch``'s stop
    as they arrive, then do what their handler does (raise in the main thread; Flower then
    ends every site's process). A signal that is ignored stays ignored; off the main thread
    nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {int(sig): signal.getsignal(sig) for sig in STOP_SIGNALS}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        switch.requested.set()
        handler = previous[signum]
        if callable(handler):
            handler(signum, frame)

    for sig, handler in previous.items():
        if callable(handler):
            signal.signal(sig, on_signal)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if callable(handler):
                signal.signal(sig, handler)


class StoppableGrid(Grid):
    """``grid`` whose every call first checks ``switch`` (replies are polled, so a stop is
    seen within one poll interval)."""

    POLL_S = 0.02
    """Seconds between two pulls of the replies still missing: a pull is a lookup in the
    link's state, and every message waits for the next (a round waited 0.05 s on average
    at 0.1 s)."""

    def __init__(self, grid: Grid, switch: StopSwitch) -> None:
        self._grid = grid
        self._switch = switch

    def set_run(self, run: Run) -> None:
        self._grid.set_run(run)

    @property
    def run(self) -> Run:
        return self._grid.run

    def create_message(
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        return self._grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        self._switch.check()
        return self._grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        self._switch.check()
        return self._grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        self._switch.check()
        replies = list(self._grid.pull_messages(message_ids))
        if self._switch.requested.is_set():
            # The stop ended the sites' processes: their error replies say only that.
            return [reply for reply in replies if not reply.has_error()]
        return replies

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        pending = set(self.push_messages(messages))
        deadline = None if timeout is None else time.time() + timeout
        replies: list[Message] = []
        while pending and (deadline is None or time.time() < deadline):
            got = list(self.pull_messages(pending))
            replies.extend(got)
            pending.difference_update(m.metadata.reply_to_message_id for m in got)
            if pending:
                self._switch.requested.wait(self.POLL_S)
        return replies
