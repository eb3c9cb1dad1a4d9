"""The server's round commits (``server.round_commits``): in order, off the server's thread,
every one finished before the rounds end, a failure raised in the server's thread."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from flwr.app import ArrayRecord

from panoramia_fl.server.round_commits import RoundCommits

ARRAYS = ArrayRecord([np.zeros(3)])


def test_the_next_round_goes_on_while_a_round_is_committed_and_commits_keep_their_order():
    release = threading.Event()
    written: list[tuple[int, str]] = []

    def commit(server_round: int, arrays: ArrayRecord) -> None:
        if server_round == 1:
            assert release.wait(10)
        written.append((server_round, threading.current_thread().name))

    with RoundCommits(commit) as commits:
        commits.submit(1, ARRAYS)
        commits.submit(2, ARRAYS)  # round 1 still being committed: the server did not wait
        assert written == []
        release.set()
    assert [r for r, _ in written] == [1, 2]
    assert all(name.startswith("round-commit") for _, name in written)


def test_a_failed_commit_is_raised_and_no_later_round_is_written():
    written: list[int] = []

    def commit(server_round: int, arrays: ArrayRecord) -> None:
        if server_round == 1:
            raise OSError("disk full")
        written.append(server_round)

    # Raised at round 2's submit when round 1 has failed by then, else when the rounds end.
    with pytest.raises(OSError, match="disk full"), RoundCommits(commit) as commits:
        commits.submit(1, ARRAYS)
        commits.submit(2, ARRAYS)
        commits.submit(3, ARRAYS)
    assert written == []


def test_a_failure_of_the_last_round_is_raised_when_the_rounds_end():
    def commit(server_round: int, arrays: ArrayRecord) -> None:
        raise ValueError(f"round {server_round}: no central data")

    with pytest.raises(ValueError, match="round 3"), RoundCommits(commit) as commits:
        commits.submit(3, ARRAYS)


def test_rounds_that_stop_on_an_error_still_write_what_was_aggregated():
    written: list[int] = []
    release = threading.Event()

    def commit(server_round: int, arrays: ArrayRecord) -> None:
        assert release.wait(10)
        written.append(server_round)

    with pytest.raises(KeyboardInterrupt), RoundCommits(commit) as commits:
        commits.submit(4, ARRAYS)
        release.set()
        raise KeyboardInterrupt
    assert written == [4]
