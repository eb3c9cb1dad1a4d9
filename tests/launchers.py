"""How tests start programs: the CLI in a session of its own that takes a Ctrl-C as a
terminal's would, and a benchmark script loaded as a module.

A test signals such a program only through :func:`interrupt` and :func:`end_session`: the
signal goes to the program's own session while it is alive, never to a process group or a
process of the test runner (an xdist worker), whatever pid the kernel hands out again."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from panoramia_fl.simulations.processes import is_alive


def _default_sigint() -> None:
    """A background job starts with SIGINT ignored; a terminal's Ctrl-C would not be."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class SessionPopen(subprocess.Popen):
    """A program started in a session of its own, and its kernel start time (what
    :func:`end_session` ends is what started in that session since)."""

    def __init__(self, argv: list[str], **kwargs: Any) -> None:
        super().__init__(argv, start_new_session=True, **kwargs)
        self.started = started_at(self.pid)


def start_interruptible(
    argv: list[str], *, cwd: Path, env: dict[str, str], log: Path
) -> SessionPopen:
    """``argv`` in a session of its own (its process group takes a Ctrl-C as a terminal's
    would: SIGINT not ignored), its output appended to ``log``."""
    with open(log, "ab") as fh:
        return SessionPopen(
            argv,
            cwd=cwd,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            preexec_fn=_default_sigint,
        )


def interrupt(proc: subprocess.Popen, sig: int = signal.SIGINT) -> None:
    """``sig`` to ``proc``'s process group, as a terminal sends a Ctrl-C: only while ``proc``
    is alive (so its pid is still its own) and only when that group is its own session's,
    not the test runner's."""
    assert proc.poll() is None, "the program ended before the signal"
    group = os.getpgid(proc.pid)
    assert group == proc.pid == os.getsid(proc.pid), "not a session of its own"
    assert group != os.getpgrp() and os.getsid(proc.pid) != os.getsid(0)
    os.killpg(group, sig)


def _session_and_start(pid: int) -> tuple[int, int] | None:
    """(session, start time in clock ticks) of a live process, from /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name may hold spaces
    return None if fields[0] in ("Z", "X") else (int(fields[3]), int(fields[19]))


def session_processes(sid: int, *, since: int = 0) -> list[tuple[int, int]]:
    """(pid, start time) of every live process of session ``sid`` started at ``since`` or
    later: a session whose leader's pid the kernel handed out again is another program's,
    started later than the first's."""
    found = []
    for entry in Path("/proc").iterdir():
        info = _session_and_start(int(entry.name)) if entry.name.isdigit() else None
        if info is not None and info[0] == sid and info[1] >= since:
            found.append((int(entry.name), info[1]))
    return found


def started_at(pid: int) -> int:
    """The kernel start time of the live process ``pid`` (clock ticks since boot)."""
    info = _session_and_start(pid)
    assert info is not None, f"process {pid} is not running"
    return info[1]


def end_session(proc: SessionPopen, *, timeout_s: float = 30.0) -> None:
    """SIGKILL every process of ``proc``'s session started since ``proc`` until none is
    left (Ray's leftovers too); never a process outside that session, never the runner."""
    if proc.poll() is None:
        interrupt(proc, signal.SIGKILL)
    proc.wait(timeout=timeout_s)
    deadline = time.time() + timeout_s
    while left := session_processes(proc.pid, since=proc.started):
        for pid, start in left:
            if pid != os.getpid() and is_alive(pid, start):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        assert time.time() < deadline, f"processes of the program survive: {left}"
        time.sleep(0.2)


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module (benchmarks are scripts, not a package)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module
