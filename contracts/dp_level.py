"""The DP level of a run (``dp.level``) and the rule that resolves it from a config, and
its secure-aggregation setting (``fl.secure_aggregation``).

The config loader (``simulations.experiment_config.DPConfig``) and the report (which reads a run's
``config.yaml`` as plain data) both resolve the level through :func:`resolve_dp_level`.
"""

from __future__ import annotations

from typing import Literal

DPLevel = Literal["none", "record", "client", "both", "distributed"]
"""record = DP-SGD at each site (Opacus, local DP of each record); client = clipped site
updates and a noised aggregate on the server (Flower's wrappers: central client-level DP);
both; distributed = each site clips its own update and adds its share of the client-level
noise, so that the sum carries all of it; none."""
DP_LEVELS: tuple[DPLevel, ...] = ("none", "record", "client", "both", "distributed")
CLIENT_LEVELS: tuple[DPLevel, ...] = ("client", "both", "distributed")
"""The levels accounted at the client level (one site added or removed)."""
RECORD_LEVELS: tuple[DPLevel, ...] = ("record", "both")
"""The levels with DP-SGD at each site."""

SecureAggregationMode = Literal["none", "ideal"]
"""``ideal``: the server's strategy receives only the (weighted) sum of a round's updates,
the guarantee a secure-aggregation protocol promises, realised in a simulation (never on a
deployment: no real protocol backs it); ``none``: each update in the clear."""
SECURE_AGGREGATIONS: tuple[SecureAggregationMode, ...] = ("none", "ideal")


def resolve_dp_level(level: str | None, *, enabled: bool, record_epsilon_inf: bool) -> DPLevel:
    """The level a ``dp`` section states.

    ``level`` wins when given; without it ``enabled`` means record level. A record-level
    ``target_epsilon`` of inf means no record-level DP (convenient in sweeps): it turns
    record into none and both into client.

    Raises
    ------
    ValueError
        When ``level`` is not one of :data:`DP_LEVELS`.
    """
    if level is None:
        level = "record" if enabled else "none"
    if record_epsilon_inf:
        level = {"record": "none", "both": "client"}.get(level, level)
    if level not in DP_LEVELS:
        raise ValueError(f"dp.level must be one of {list(DP_LEVELS)}, got {level!r}")
    return level
