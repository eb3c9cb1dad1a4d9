"""The process Ray's site workers are forked from: it imports once what each of them would
import as it starts, then forks a worker for each request of
:mod:`~simulations.fork_request`, the command a run's raylet starts for a worker.

Run as ``python -m panoramia_fl.simulations.fork_server FD SOCKET BEFORE_RAY WITH_RAY`` by
:mod:`~simulations.worker_forks` (``FD``: a socket it listens at, at the path ``SOCKET``;
each list: modules, comma-separated), in the environment its Ray's workers will import
in, as the run starts its Ray:

1. it imports ``BEFORE_RAY`` (torch, Flower's client side, the site code) at once;
2. at the first request it takes that worker's environment (the variables its raylet adds
   for it) and imports Ray's worker program and ``WITH_RAY``, then forks. Ray reads some of
   its settings from the environment once, as it loads (the worker's raylet among them),
   so a request whose environment is not the first one's is refused, and so is a first
   one whose environment differs from this process's in more than Ray's variables, and
   all of them if the imports loaded CUDA's driver (which a fork cannot use): the
   requester then starts Ray's worker program itself.

It stops when its raylet does, or when its standard input closes (the run's process ended),
and removes its socket.

Linux only (``os.pidfd_open``): elsewhere Ray starts its workers as it always does.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import runpy
import selectors
import signal
import socket
import struct
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from panoramia_fl.simulations.process_heap import CollectorPause
from panoramia_fl.simulations.swapped import swapped

SOCKET_ENV = "PANORAMIA_FL_FORK_SOCKET"
"""Where a run's fork server listens, in the environment of its Ray's raylet."""

WORKER_ENV = "PANORAMIA_FL_FORK_WORKER"
"""Ray's worker program, which :mod:`~simulations.fork_request` stands in for."""

STATUS = struct.Struct("!i")
"""The server's replies to a request, in order: the forked worker's pid (0: refused), then
its exit status (``os.waitstatus_to_exitcode``: negative for a signal)."""

LENGTH = struct.Struct("!I")
"""A request's length, ahead of its JSON (its standard streams travel beside it)."""

STREAMS = 3
"""Standard input, output and error: the request's descriptors, in that order."""

WORKER_MODULE = "ray._private.workers.default_worker"
"""Ray's worker program: imported here so that a forked worker's run of it finds its modules
loaded."""

RAYLET_PID_ENV = "RAY_RAYLET_PID"
"""The variable in which a raylet gives its workers its pid: they end when it does."""

RAY_VARIABLES = ("RAY_", "SPT_NOENV", "PYTHONBREAKPOINT", "PYTHONPATH", "PANORAMIA_FL_FORK_")
"""Variables (or prefixes) by which a worker's environment may differ from the one this
process started in: Ray's own, those it sets for its workers and driver (setproctitle's,
the debugger's), the search path (taken over as Python would, :func:`_search_path`), and
this server's. Neither is read by the modules imported before Ray."""


@dataclass(frozen=True)
class WorkerRequest:
    """What a fork becomes: Ray's worker command line (the program first), environment,
    working folder and standard streams, as the raylet gave them to the requesting process."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    streams: list[int] = field(default_factory=list)


def encode_request(argv: list[str], env: dict[str, str], cwd: str) -> bytes:
    body = json.dumps({"argv": argv, "env": env, "cwd": cwd}).encode()
    return LENGTH.pack(len(body)) + body


def receive_exactly(conn: socket.socket, size: int) -> bytes | None:
    """``size`` bytes from ``conn``; None if it closes first."""
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _read_request(conn: socket.socket) -> WorkerRequest:
    """One request: its length, JSON and streams (sent together), the JSON's rest after."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, STREAMS)
    if len(fds) != STREAMS or len(data) < LENGTH.size:
        for fd in fds:
            os.close(fd)
        raise ConnectionError("a request without its length or its three streams")
    (length,) = LENGTH.unpack_from(data)
    body = data[LENGTH.size :]
    rest = receive_exactly(conn, length - len(body))
    if rest is None:
        raise ConnectionError("a request cut short")
    fields = json.loads(body + rest)
    return WorkerRequest(fields["argv"], fields["env"], fields["cwd"], fds)


def _differs_only_in_ray_variables(started: dict[str, str], requested: dict[str, str]) -> bool:
    differing = {k for k in started.keys() | requested.keys() if started.get(k) != requested.get(k)}
    return all(name.startswith(RAY_VARIABLES) for name in differing)


def _search_path(program: str, pythonpath: str, started: list[str], inherited: str) -> list[str]:
    """``sys.path`` as Python sets it for ``program`` run with ``pythonpath``: its folder,
    then those folders, then the interpreter's own (``started`` less its first entry and
    the folders of the ``PYTHONPATH`` this process ``inherited``)."""
    own = [p for p in inherited.split(os.pathsep) if p]
    interpreter = [p for p in started[1:] if p not in own]
    return [os.path.dirname(program), *[p for p in pythonpath.split(os.pathsep) if p], *interpreter]


def _cuda_driver_loaded() -> bool:
    """Whether CUDA's driver library is in this process (the imports are meant to leave
    it out: a site's CUDA starts at its first use)."""
    return "libcuda.so" in Path("/proc/self/maps").read_text()


def _take_environment(wanted: dict[str, str]) -> None:
    """This process's environment made ``wanted``, changing only the variables that
    differ: setproctitle (Ray's process titles) finds the command line's memory from the
    first variable's, which a cleared environment would lose."""
    for name in [name for name in os.environ if name not in wanted]:
        del os.environ[name]
    for name, value in wanted.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


@dataclass
class _Fork:
    pid: int
    pidfd: int
    conn: socket.socket


@contextlib.contextmanager
def _actor_class_ids_from_the_os() -> Iterator[None]:
    """Actor classes defined meanwhile (``ray.remote`` on a class: Flower's site actor) take
    their ids from the OS, not from Ray's C++ generator of random ids. That generator seeds
    itself at its first draw: a draw here would seed it once for every fork, and each fork
    would then draw the same ids as the others (two workers forked together crashed on the
    object store's warm-up object, put under the same id by both). Its first draw is then
    each fork's own."""
    import ray.actor
    from ray import ActorClassID

    class FromTheOs:
        @staticmethod
        def from_random() -> ActorClassID:
            return ActorClassID(os.urandom(ActorClassID.size()))

    with swapped(ray.actor, ActorClassID=FromTheOs):
        yield


class _Server:
    """The forks' environment, once the first request has set it, and their bookkeeping."""

    def __init__(
        self, with_ray: list[str], started: dict[str, str], loading: CollectorPause
    ) -> None:
        self.with_ray = with_ray
        self.started = started
        self.loading = loading  # ended once the first request's imports are done
        # What the imports before Ray set in the environment (Flower: gRPC's verbosity),
        # as they would have in a worker that imported them.
        self.set_by_imports = {k: v for k, v in os.environ.items() if started.get(k) != v}
        self.environment: dict[str, str] | None = None
        self.raylet: int | None = None  # a pidfd, once the first request named its raylet
        self.ended = False  # the raylet ended before the first request was taken
        self.forks: dict[int, _Fork] = {}  # by the fd the selector reports: pidfd or request's

    def admits(self, request: WorkerRequest) -> bool:
        """Whether a fork of this process is the worker ``request`` asks for; the first
        one admitted sets the environment and imports Ray's modules in it."""
        if self.environment is not None:
            return request.env == self.environment
        if "ray" in sys.modules or not _differs_only_in_ray_variables(self.started, request.env):
            return False
        sys.path[:] = _search_path(
            request.argv[0],
            request.env.get("PYTHONPATH", ""),
            sys.path,
            self.started.get("PYTHONPATH", ""),
        )
        _take_environment({**request.env, **self.set_by_imports})
        self.environment = dict(request.env)
        try:
            importlib.import_module(WORKER_MODULE)
            with _actor_class_ids_from_the_os():
                for name in self.with_ray:
                    importlib.import_module(name)
        finally:
            # Frozen out of the collector's walks, in this process and in every fork: a walk
            # would write to each object and copy every page a fork shares with this process.
            self.loading.end()
        if _cuda_driver_loaded():
            # CUDA's driver does not survive a fork: from here every request is refused.
            self.environment = {}
            return False
        raylet = request.env.get(RAYLET_PID_ENV)
        if raylet is not None:
            try:
                self.raylet = os.pidfd_open(int(raylet))
            except (OSError, ValueError):
                self.ended = True  # the raylet is gone, and its workers with it
                return False
        return True

    def unique_forks(self) -> list[_Fork]:
        return list({fork.pid: fork for fork in self.forks.values()}.values())


def serve(
    listener: socket.socket, socket_path: Path, before_ray: list[str], with_ray: list[str]
) -> WorkerRequest | None:
    """Import ``before_ray``, then fork a worker for each request admitted at ``listener``
    (a socket listening at ``socket_path``, where requests queue meanwhile) until the raylet
    ends or standard input closes, and remove that socket's folder (as SIGTERM's handler
    does, which ends the process at once: :func:`main`). Returns None in this process, when
    it stops, and the request in each fork, whose caller becomes that worker
    (:func:`become_worker`) with nothing of the server left on its stack."""
    started = dict(os.environ)
    try:
        loading = CollectorPause()  # until the first request's imports (_Server.admits)
        for name in before_ray:
            importlib.import_module(name)
        server = _Server(with_ray, started, loading)
        selector = selectors.DefaultSelector()
        selector.register(listener, selectors.EVENT_READ)
        stdin = sys.stdin.fileno()
        selector.register(stdin, selectors.EVENT_READ)
        while True:
            for key, _ in selector.select():
                if key.fd == stdin:
                    if not os.read(stdin, 1 << 10):
                        return None
                elif key.fd == server.raylet:
                    return None
                elif key.fileobj is listener:
                    request = _accepted(listener, selector, server)
                    if request is not None or server.ended:
                        return request
                else:
                    _fork_event(selector, server, server.forks[key.fd], key.fd)
    finally:
        _remove_socket(socket_path)


def _remove_socket(socket_path: Path) -> None:
    """The socket at ``socket_path`` and its folder (made for it alone), from the server's
    process only: a fork keeps the server's stack, and its ``finally`` clauses."""
    if os.getpid() == _SERVER_PID:
        socket_path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            socket_path.parent.rmdir()


def _accepted(
    listener: socket.socket, selector: selectors.BaseSelector, server: _Server
) -> WorkerRequest | None:
    """Take one request: refuse it, or fork. Returns the request in the fork, else None."""
    conn, _ = listener.accept()
    try:
        request = _read_request(conn)
    except (OSError, ValueError, KeyError) as err:
        print(f"fork_server: {err}", file=sys.stderr)
        conn.close()
        return None
    if not server.admits(request):
        for fd in request.streams:
            os.close(fd)
        with contextlib.suppress(OSError):
            conn.sendall(STATUS.pack(0))
        conn.close()
        return None
    if server.raylet is not None and server.raylet not in selector.get_map():
        selector.register(server.raylet, selectors.EVENT_READ)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        selector.close()
        listener.close()
        if server.raylet is not None:
            os.close(server.raylet)
        for fork in server.unique_forks():
            fork.conn.close()
            os.close(fork.pidfd)
        conn.close()
        return request
    for fd in request.streams:
        os.close(fd)
    fork = _Fork(pid, os.pidfd_open(pid), conn)
    selector.register(fork.pidfd, selectors.EVENT_READ)
    selector.register(conn, selectors.EVENT_READ)
    server.forks[fork.pidfd] = server.forks[conn.fileno()] = fork
    conn.sendall(STATUS.pack(pid))
    return None


def _fork_event(selector: selectors.BaseSelector, server: _Server, fork: _Fork, fd: int) -> None:
    """A worker ended (its pidfd), or its requester did (its connection)."""
    if fd == fork.conn.fileno():
        if not fork.conn.recv(1):
            # The requester is gone (the raylet killed it): so goes its worker, as it would
            # have with it.
            os.kill(fork.pid, signal.SIGKILL)
            selector.unregister(fork.conn)
        return
    _, status = os.waitpid(fork.pid, 0)
    with contextlib.suppress(OSError):  # the requester went first
        fork.conn.sendall(STATUS.pack(os.waitstatus_to_exitcode(status)))
    selector.unregister(fork.pidfd)
    if fork.conn.fileno() in selector.get_map():
        selector.unregister(fork.conn)
    del server.forks[fork.pidfd], server.forks[fork.conn.fileno()]
    fork.conn.close()
    os.close(fork.pidfd)


def become_worker(request: WorkerRequest) -> None:
    """This fork becomes the worker the raylet asked for: its streams, folder and command
    line (its environment and search path are this process's since the first request),
    signals as a new Python process has them, then Ray's worker program run as the main
    module. Returns, or raises ``SystemExit``, as that program does."""
    for target, fd in enumerate(request.streams):
        os.dup2(fd, target)
        if fd > 2:
            os.close(fd)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.chdir(request.cwd)
    sys.argv = list(request.argv)
    if "numpy" in sys.modules:
        # numpy's global generator was seeded from the OS at import, once for all forks; a
        # new process has a seed of its own.
        sys.modules["numpy"].random.seed()
    runpy.run_path(request.argv[0], run_name="__main__")


_SERVER_PID = os.getpid()


def _modules(listed: str) -> list[str]:
    return [name for name in listed.split(",") if name]


def _stopped(socket_path: Path, signum: int, frame: object) -> NoReturn:
    """Ends the process at once, as a stop from outside would, with its socket's folder
    removed. Not by raising: an exception raised as a C extension imports its modules
    becomes that import's ``ImportError`` (numpy's does), and the server would end with 1."""
    _remove_socket(socket_path)
    sys.stderr.flush()
    os._exit(128 + signum)


def main() -> None:
    listening, socket_path, before_ray, with_ray = sys.argv[1:]
    # Ctrl-C in the run's terminal reaches this process too: the run decides when it ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Stopped from outside (its run killed, a process group ended), it still removes its
    # socket's folder (serve's cleanup), which nothing else would once the run is gone.
    signal.signal(signal.SIGTERM, functools.partial(_stopped, Path(socket_path)))
    listener = socket.socket(fileno=int(listening))
    try:
        request = serve(listener, Path(socket_path), _modules(before_ray), _modules(with_ray))
    except Exception:
        traceback.print_exc()
        raise SystemExit(1) from None
    if request is None:
        # Nothing left to write: no teardown of the modules (about a second), which the
        # run's process waits for as it ends.
        sys.stderr.flush()
        os._exit(0)
    become_worker(request)


if __name__ == "__main__":
    main()
