"""The libraries' own logging in a run: Flower, Ray and Opacus speak only with ``--verbose``."""

from __future__ import annotations

import logging
import os
import warnings


def quiet_logs(verbose: bool) -> None:
    """Flower, Ray and Opacus are chatty; show them only with ``--verbose``."""
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
    if verbose:
        return
    for name in ("ray", "opacus"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # Flower logs each site's failure with its traceback; the run records it itself (its
    # audit file, the round's failures) and says it on stderr at the end.
    logging.getLogger("flwr").setLevel(logging.CRITICAL)
    # Opacus's notices (secure RNG off in a seeded simulation, the RDP orders it tries):
    # expected in a simulation. Its deprecations still show.
    warnings.filterwarnings("ignore", category=UserWarning, module="opacus")
    os.environ.setdefault("RAY_LOG_TO_STDERR", "0")
