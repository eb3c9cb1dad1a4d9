"""Stopping the ServerApp on request (Ctrl-C, SIGTERM in the harness).

In a simulation the ServerApp runs in a thread of its own that waits on its grid for
replies (up to ``ServerSettings.timeout_s``); a signal reaches the main thread only. A
:class:`StopSwitch` lets the harness end that thread: every grid call after
:meth:`StopSwitch.stop` raises :class:`RunStopped`, and the round in progress is abandoned
before it writes anything.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

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


class StoppableGrid(Grid):
    """``grid`` whose every call first checks ``switch`` (replies are polled, so a stop is
    seen within one poll interval)."""

    POLL_S = 0.1

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
        return self._grid.pull_messages(message_ids)

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
