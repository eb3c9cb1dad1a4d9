"""The one-run bounds' names and default delta: light (no numpy, no scipy), so configs and the
CLI's parser read them without loading the bounds (:mod:`audit.stats.one_run`)."""

from __future__ import annotations

from typing import Literal

Method = Literal["steinke", "fdp"]
METHODS: tuple[Method, ...] = ("steinke", "fdp")
METHOD_LABELS: dict[Method, str] = {
    "steinke": "Steinke et al. (2023)",
    "fdp": "f-DP, Gaussian (Mahloujifar et al. 2025)",
}
"""How reports name each method."""

DEFAULT_DELTA = 1e-5
"""The default delta, defined here only: of the one-run bounds when nobody states one (the
f-DP paper's Table 1), of the run config's ``dp.delta`` and of the canary clients' estimate."""
DEFAULT_BETA = 0.05
"""The default level of every lower bound, defined here only: of ``audit.settings.beta`` and
of the canary clients' bound."""
