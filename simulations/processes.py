"""Child processes started by the harness, and stopped by PID (with what they spawned).

Used by the loopback Flower consortium and the local Ray head: a process is recorded with
its PID and its kernel start time, so a recycled PID is never signalled, and stopping it
also stops its descendants (collected before the first signal, because orphans are
re-parented and could no longer be found). Nothing is stopped by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO


class ProcessError(RuntimeError):
    """A started process failed to start, died early, or never became ready."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (chosen by the OS)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) of a live process, from /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name may hold spaces
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[1]), int(fields[19])


def descendants(pid: int) -> list[tuple[int, int]]:
    """(pid, start time) of every live process below ``pid``, parents first."""
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (info := _stat(int(entry.name))) is not None:
            children.setdefault(info[0], []).append((int(entry.name), info[1]))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child[0])
    return found


def is_alive(pid: int, start: int) -> bool:
    """Whether the process ``pid`` that started at ``start`` still runs."""
    info = _stat(pid)
    return info is not None and info[1] == start


def _signal(pid: int, start: int, sig: int) -> None:
    if is_alive(pid, start):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


@dataclass
class Started:
    """One process started by a :class:`ProcessGroup`."""

    name: str
    proc: subprocess.Popen
    start: int
    log: IO[bytes]
    log_path: Path


@dataclass
class ProcessGroup:
    """Processes started here; :meth:`stop` ends them (and their descendants) by PID."""

    started: list[Started] = field(default_factory=list)

    def start(
        self,
        name: str,
        argv: list[str],
        *,
        env: dict[str, str],
        log_path: Path,
        cwd: Path | None = None,
        own_session: bool = False,
    ) -> subprocess.Popen:
        """Start ``argv`` with stdout and stderr appended to ``log_path``; ``own_session``:
        in a session of its own, so that no signal to this process's group (a terminal's
        Ctrl-C, a test's) reaches it, nor any it or its children send to their group reaches
        this process: :meth:`stop` ends it."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        try:
            proc = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=own_session,
            )
        except OSError as err:
            log.close()
            raise ProcessError(f"could not start {name} ({argv[0]}): {err}") from err
        info = _stat(proc.pid)
        self.started.append(Started(name, proc, info[1] if info else -1, log, log_path))
        return proc

    def check_alive(self) -> None:
        """Raise if a started process has exited (naming it and its log)."""
        for item in self.started:
            if item.proc.poll() is not None:
                raise ProcessError(
                    f"{item.name} exited with code {item.proc.returncode}; see {item.log_path}"
                )

    def pids(self) -> list[int]:
        """PIDs of the started processes and of everything they spawned that still runs."""
        out = []
        for item in self.started:
            out.append(item.proc.pid)
            out.extend(pid for pid, _ in descendants(item.proc.pid))
        return out

    def stop(self, *, grace_s: float = 10.0) -> None:
        """SIGTERM each process (last started first) and its descendants; SIGKILL what is
        still there after ``grace_s``. Safe to call twice."""
        targets: list[tuple[int, int]] = []
        for item in reversed(self.started):
            targets.extend(descendants(item.proc.pid))
            targets.append((item.proc.pid, item.start))
        for pid, start in targets:
            _signal(pid, start, signal.SIGTERM)
        deadline = time.time() + grace_s
        for item in self.started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                item.proc.wait(timeout=max(0.1, deadline - time.time()))
        # Descendants first re-checked, since SIGTERM on a parent may have spawned or
        # orphaned more of them.
        for item in self.started:
            targets.extend(descendants(item.proc.pid))
        while time.time() < deadline and any(is_alive(p, s) for p, s in targets):
            time.sleep(0.1)
        for pid, start in targets:
            _signal(pid, start, signal.SIGKILL)
        for item in self.started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                item.proc.wait(timeout=5)
            item.log.close()
        self.started.clear()


def wait_for_port(host: str, port: int, *, timeout_s: float, group: ProcessGroup) -> None:
    """Return once something accepts TCP connections on ``host:port``; raise if a process
    of ``group`` died first or ``timeout_s`` passed."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        group.check_alive()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(1.0)
            if sock.connect_ex((host, port)) == 0:
                return
        time.sleep(0.3)
    raise ProcessError(f"nothing listens on {host}:{port} after {timeout_s:.0f}s")
