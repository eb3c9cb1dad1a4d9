"""What a Ray worker of a run imports as it starts, before it becomes a site.

Importing this module is the whole of its use: Ray's ``preload_python_modules`` imports the
modules it names and calls nothing, so the import itself

1. registers Flower's simulation package with its ``__init__`` not yet run
   (:func:`defer_simulation_package_init`), then
2. imports :data:`SITE_PROCESS_MODULES`, the collector paused meanwhile and what they
   load frozen after (:class:`~simulations.process_heap.CollectorPause`).

Why (1): a site process needs Flower's actor class, in
``flwr.simulation.ray_transport.ray_actor``, and Python runs a package's ``__init__`` before
any of its submodules. ``flwr.simulation``'s imports the engine's server side (the link's
state, and SQLAlchemy, Alembic and FastAPI with it): 0.7-0.8 CPU s of every site process's
start, in a stretch where a 2-core machine is busy on both cores, for code a site never runs.
With its ``__init__`` deferred, the package's submodules import as usual, and the
``__init__`` runs, as it would have, when a name it defines is first asked for. The driver
never imports this module, and a Ray the run joins (``ray.address``) preloads nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
import types
from typing import Any

from panoramia_fl.simulations.process_heap import CollectorPause
from panoramia_fl.simulations.site_modules import SIMULATION_PACKAGE, SITE_PROCESS_MODULES

_INIT_LOCK = threading.Lock()


class _InitOnFirstUse(types.ModuleType):
    """A package whose ``__init__`` runs at the first lookup of a name the module does not
    hold yet (its submodules' imports look up only ``__path__`` and ``__spec__``, which it
    holds from the start)."""

    def __getattr__(self, name: str) -> Any:
        with _INIT_LOCK:
            if type(self) is _InitOnFirstUse:
                _run_init(self)
        return getattr(self, name)


def _run_init(package: types.ModuleType) -> None:
    """Run ``package``'s ``__init__`` in it, a plain module again first: a name the
    ``__init__`` looks up while it runs is found, or missing, as in any package's."""
    package.__class__ = types.ModuleType
    spec = package.__spec__
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(package)


def defer_simulation_package_init() -> bool:
    """Register :data:`SIMULATION_PACKAGE` in this process with its ``__init__`` deferred to
    the first use of one of its names. Returns whether it did: not when the package is
    imported already."""
    if SIMULATION_PACKAGE in sys.modules:
        return False
    parent_name, _, child = SIMULATION_PACKAGE.rpartition(".")
    parent = importlib.import_module(parent_name)
    spec = importlib.util.find_spec(SIMULATION_PACKAGE)
    if spec is None:
        raise ImportError(f"no module named {SIMULATION_PACKAGE!r}", name=SIMULATION_PACKAGE)
    package = importlib.util.module_from_spec(spec)
    package.__class__ = _InitOnFirstUse
    sys.modules[SIMULATION_PACKAGE] = package
    setattr(parent, child, package)  # as the import system binds a loaded submodule
    return True


_loading = CollectorPause()
try:
    defer_simulation_package_init()
    for _module in SITE_PROCESS_MODULES:
        importlib.import_module(_module)
finally:
    _loading.end()
