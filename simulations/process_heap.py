"""Python's cyclic garbage collector in the harness's processes: the modules' objects kept
out of its walks.

Once torch, Ray and Flower are loaded a process holds some 350,000 objects the collector
tracks, nearly all of them the modules' own, alive until the process ends. Each full
collection walks them all (0.2-0.3 s of CPU, a few times a run in every process) and so does
the interpreter's exit (about a second). Frozen (:func:`gc.freeze`), they are left out of
both; objects made later are collected as before. While they load, the collector can be
paused (:class:`CollectorPause`): its full collections would walk, again and again, a heap
that only grows. And a process that has nothing left to write can end without the
interpreter's teardown (:func:`exit_without_teardown`).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import sys
import threading
from typing import NoReturn


def freeze_loaded_modules() -> None:
    """Freeze the process's objects, once: call when its modules are loaded (a later call
    does nothing). Objects in reference cycles that die after this stay allocated, so it is
    for what lives as long as the process: the imports, not a run's data."""
    if gc.get_freeze_count() == 0:
        gc.freeze()


def freeze_before_exit() -> None:
    """Freeze every object before the process exits: the exit then skips the walk. Only
    objects in reference cycles lose their finalizers; call once the process's files are
    written and closed."""
    gc.freeze()


def exit_without_teardown(status: int) -> NoReturn:
    """End the process with ``status`` as :func:`sys.exit` from the main thread would, less
    the interpreter's teardown of its modules and of the libraries they loaded (0.3-0.4 s
    once torch and Ray are loaded, their objects frozen or not): its other threads are
    waited for and its ``atexit`` handlers run, in Python's own order, and its standard
    streams are flushed. Call it from the main thread, once the files it wrote are closed."""
    threading._shutdown()  # type: ignore[attr-defined]  # what Python's exit does first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader gone, a stream closed
            stream.flush()
    os._exit(status)


class CollectorPause:
    """The collector off from this object's making until :meth:`end`: for a process loading
    its modules. Loading torch, Ray and Flower's engine, the collector ran five full
    collections over the growing heap, about 0.5 s of the 3-4 s the imports took, and found
    some 8,000 objects (2 MB) to free; those stay, frozen with the modules."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._restart = gc.isenabled()
        self._ended = False
        gc.disable()

    def end(self) -> None:
        """Freeze what the process has loaded (:func:`freeze_loaded_modules`) and restart
        the collector if it ran before; a later call, from any thread, does nothing."""
        with self._lock:
            if self._ended:
                return
            self._ended = True
            freeze_loaded_modules()
            if self._restart:
                gc.enable()
