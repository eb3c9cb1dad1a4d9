"""Python's cyclic garbage collector in the harness's processes: the modules' objects kept
out of its walks.

Once torch, Ray and Flower are loaded a process holds some 350,000 objects the collector
tracks, nearly all of them the modules' own, alive until the process ends. Each full
collection walks them all (0.2-0.3 s of CPU, a few times a run in every process) and so does
the interpreter's exit (about a second). Frozen (:func:`gc.freeze`), they are left out of
both; objects made later are collected as before.
"""

from __future__ import annotations

import gc


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
