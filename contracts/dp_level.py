"""The DP level of a run (``dp.level``) and the rule that resolves it from a config.

The config loader (``simulations.config.DPConfig``) and the report (which reads a run's
``config.yaml`` as plain data) both resolve the level through :func:`resolve_dp_level`.
"""

from __future__ import annotations

from typing import Literal

DPLevel = Literal["none", "record", "client", "both"]
"""record = DP-SGD at each site (Opacus); client = clipped site updates and a noised
aggregate on the server (Flower); both; none."""
DP_LEVELS: tuple[DPLevel, ...] = ("none", "record", "client", "both")


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
