"""How tests start programs: the CLI in a session of its own that takes a Ctrl-C as a
terminal's would, and a benchmark script loaded as a module."""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType


def _default_sigint() -> None:
    """A background job starts with SIGINT ignored; a terminal's Ctrl-C would not be."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_interruptible(
    argv: list[str], *, cwd: Path, env: dict[str, str], log: Path
) -> subprocess.Popen:
    """``argv`` in a session of its own (its process group takes a Ctrl-C as a terminal's
    would: SIGINT not ignored), its output appended to ``log``."""
    with open(log, "ab") as fh:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_default_sigint,
        )


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module (benchmarks are scripts, not a package)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module
