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
"""delta of the one-run bounds when nobody states one (the run config's ``dp.delta`` default
and the f-DP paper's Table 1)."""
