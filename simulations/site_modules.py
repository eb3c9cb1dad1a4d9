"""The modules a site process imports before its first message, by name: for the process
that imports them (:mod:`~simulations.site_preload`) and for the driver, which names them
to Ray's workers and to their fork server and must not import them itself."""

from __future__ import annotations

SITE_CODE_MODULE = "panoramia_fl.simulations.apps"
"""The module the pickled ClientApp comes from: torch, Flower's client side and the
project's site code with it, and not Ray."""

SITE_PROCESS_MODULES = ("flwr.simulation.ray_transport.ray_actor", SITE_CODE_MODULE)
"""What a site process imports before it handles its first message: the module of Flower's
site actor class, and :data:`SITE_CODE_MODULE`. Importing touches no GPU: a site's CUDA
starts at its first use, after Ray has set the devices the site holds."""

SIMULATION_PACKAGE = "flwr.simulation"
"""Flower's simulation engine: its package's ``__init__`` imports the engine's server side
(SQLAlchemy, Alembic and FastAPI with it). A site process defers that ``__init__``
(:mod:`~simulations.site_preload`); the driver imports the package beside Ray's start
(:func:`~simulations.ray_start.ray_started_ahead`)."""
