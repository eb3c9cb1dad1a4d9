"""The command the raylet of a run's Ray starts for each worker, in place of Ray's worker
program: it asks the run's :mod:`~simulations.fork_server` for a worker forked with this
process's command line, environment, folder and standard streams, then waits for it and
exits as it exits. The raylet knows the worker by the pid it registers with, and a worker
whose requester is killed is killed with it.

When no server answers, or it refuses (:mod:`~simulations.fork_server` says when), this
process becomes Ray's worker program itself, as Ray would have started it.
"""

from __future__ import annotations

import os
import socket
import sys

from panoramia_fl.simulations.fork_server import (
    SOCKET_ENV,
    STATUS,
    STREAMS,
    WORKER_ENV,
    encode_request,
    receive_exactly,
)


def _forked(socket_path: str, argv: list[str]) -> socket.socket | None:
    """The connection to the server once it has forked the worker; None when none did
    (no server, or one that refused)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(socket_path)
        request = encode_request(argv, dict(os.environ), os.getcwd())
        socket.send_fds(conn, [request], list(range(STREAMS)))
        if _status(conn):
            return conn
    except OSError:
        pass
    conn.close()
    return None


def _status(conn: socket.socket) -> int | None:
    data = receive_exactly(conn, STATUS.size)
    return None if data is None else int(STATUS.unpack(data)[0])


def main() -> None:
    program = os.environ[WORKER_ENV]
    argv = [program, *sys.argv[1:]]
    conn = _forked(os.environ.get(SOCKET_ENV, ""), argv)
    if conn is None:
        os.execv(sys.executable, [sys.executable, *argv])
    code = _status(conn)
    if code is None:
        raise SystemExit(1)  # the server ended first; its workers end with the raylet
    if code < 0:
        os.kill(os.getpid(), -code)
    raise SystemExit(code)


if __name__ == "__main__":
    main()
