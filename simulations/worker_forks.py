"""Ray's workers forked from one process that imported their modules once.

Each worker of a Ray the run starts imports Ray, torch, Flower's client side and the site
code as it starts (:data:`~simulations.ray_start.SITE_PRELOAD_MODULE`): about 2.6 CPU s
and 480 MiB of its own a worker, paid again by every worker. Here a
:mod:`~simulations.fork_server` imports them once, as soon as the run knows its settings
(beside the driver's own start, on a core it leaves idle), and the raylet's command for a
worker (:mod:`~simulations.fork_request`) has it fork one: the worker starts with its
modules loaded, shares their memory with the server until it writes to it, and runs Ray's
worker program with the raylet's command line and environment as before.

A server serves the workers of one Ray (each Ray a run starts for itself; a sweep's shared
head and a cluster the run joins start theirs as Ray does), and ends with its raylet, with
the next Ray's start, or with this process.
"""

from __future__ import annotations

import atexit
import inspect
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from panoramia_fl.simulations import fork_request, fork_server
from panoramia_fl.simulations.fork_server import SOCKET_ENV, WORKER_ENV
from panoramia_fl.simulations.swapped import swapped_arguments

SOCKET_NAME = "forks.sock"


@dataclass
class ForkServer:
    """A running :mod:`~simulations.fork_server`, and the folder of its socket."""

    process: subprocess.Popen[bytes]
    folder: Path

    @property
    def socket_path(self) -> Path:
        return self.folder / SOCKET_NAME

    def close(self) -> None:
        """Stop the server, if its raylet has not (its forks are Ray's, and end with it)."""
        global _running
        if _running is self:
            _running = None
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


_running: ForkServer | None = None
"""This process's server: a process runs one Ray at a time."""


def can_fork_workers() -> bool:
    """Whether this platform has what the server needs (Linux: ``os.pidfd_open``)."""
    return hasattr(os, "pidfd_open") and hasattr(os, "fork")


def start_fork_server(
    environment: Mapping[str, str], *, before_ray: Sequence[str], with_ray: Sequence[str]
) -> ForkServer | None:
    """A new server for the workers of the next Ray this process starts, that import
    ``before_ray`` and then ``with_ray`` in ``environment`` (:mod:`~simulations.fork_server`
    says why two lists). None where workers cannot be forked."""
    if not can_fork_workers():
        return None
    global _running
    _close_server()  # the server of the Ray before is done with
    # A folder of this user's alone (mkdtemp: mode 0700): only its processes may ask for a fork.
    folder = Path(tempfile.mkdtemp(prefix="pfl-forks-"))
    # Listening before the server starts: a request that comes first waits for it.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(folder / SOCKET_NAME))
        listener.listen(64)
        command = [
            sys.executable,
            "-m",
            fork_server.__name__,
            str(listener.fileno()),
            str(folder / SOCKET_NAME),
            ",".join(before_ray),
            ",".join(with_ray),
        ]
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, env=dict(environment), pass_fds=[listener.fileno()]
        )
    server = ForkServer(process, folder)
    _running = server
    return server


@atexit.register
def _close_server() -> None:
    if _running is not None:
        _running.close()


@contextmanager
def workers_forked(server: ForkServer | None) -> Iterator[None]:
    """A raylet started meanwhile has ``server`` fork its workers: its command for a worker
    is :mod:`~simulations.fork_request`, told in its environment where the server listens
    and which program it stands in for (None: Ray's own command). ``ray.init`` has no option
    for the command, so this goes through the function that starts the raylet."""
    from ray._private import services

    if server is None:
        yield
        return

    def forking(raylet: inspect.BoundArguments) -> None:
        told = {SOCKET_ENV: str(server.socket_path), WORKER_ENV: raylet.arguments["worker_path"]}
        raylet.arguments["env_updates"] = {**(raylet.arguments.get("env_updates") or {}), **told}
        raylet.arguments["worker_path"] = fork_request.__file__

    with swapped_arguments(services, "start_raylet", forking):
        yield
