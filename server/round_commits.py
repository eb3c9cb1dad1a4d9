"""Rounds committed in order on a thread of their own, while the next round trains.

A round's central evaluation and its writing (the metrics line, the checkpoint) need only
the round's aggregated model, and so does the next round's training: the server hands them
to :class:`RoundCommits` and sends the sites the next round at once, instead of keeping them
waiting on the evaluation. One thread commits the rounds one at a time, in order, so a kill
still loses nothing committed and a resumed run redoes what lies past its last checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from flwr.app import ArrayRecord

log = logging.getLogger(__name__)

Commit = Callable[[int, ArrayRecord], None]
"""Evaluate and write one round: ``(server_round, the round's aggregated model)``."""


class RoundCommits:
    """A queue of round commits run in order by one thread.

    A commit that failed is raised in the server's thread at the next :meth:`submit` (that
    round is then abandoned, as a failed evaluation abandoned it before) or when the block
    ends, and no later round is written after it (the run's files keep a prefix of its
    rounds). Leaving the block waits for every commit submitted, also when the rounds stopped
    on an error or a stop request: a round already aggregated is written, as before.
    """

    def __init__(self, commit: Commit) -> None:
        self._commit = commit
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="round-commit")
        self._pending: list[Future[None]] = []
        self._failed = False

    def submit(self, server_round: int, arrays: ArrayRecord) -> None:
        """Queue ``server_round``'s commit; raise an earlier commit's failure first."""
        self._raise_failures()
        self._pending.append(self._pool.submit(self._run, server_round, arrays))

    def _run(self, server_round: int, arrays: ArrayRecord) -> None:
        if self._failed:
            return
        try:
            self._commit(server_round, arrays)
        except BaseException:
            self._failed = True
            raise

    def _raise_failures(self) -> None:
        done = [f for f in self._pending if f.done()]
        self._pending = [f for f in self._pending if not f.done()]
        for future in done:
            future.result()

    def __enter__(self) -> RoundCommits:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        self._pool.shutdown(wait=True)
        if exc_type is None:
            self._raise_failures()
            return
        for future in self._pending:
            if future.exception() is not None:
                # The rounds already failed for another reason: keep that one, say this one.
                log.error("a round's commit failed too: %s", future.exception())
