"""Sweeps: a base config plus points; each point is a normal run directory.

Points come either from ``grid`` (every combination of the listed values)::

    name: dp_sweep
    base: default.yaml            # relative to this file
    output_dir: runs              # sweep folder: <output_dir>/<name>
    overrides: {fl.rounds: 3}     # applied to every point
    grid:
      dp.target_epsilon: [1, inf]
      seed: [0]

or from ``points`` (a label for each hand-picked set of overrides, for settings a product
cannot express, such as DP levels with their own keys)::

    name: dp_levels
    base: default.yaml
    overrides: {fl.rounds: 3}
    points:
      no DP: {dp.level: none}
      record eps=4: {dp.level: record, dp.target_epsilon: 4}
      client z=1: {dp.level: client, dp.client.noise_multiplier: 1.0}

Exactly one of ``grid`` and ``points``. Labels become run directory names, made
filesystem-safe (``record eps=4`` -> ``record_eps=4``); they must stay distinct.

``replicates: N`` (or ``panoramia-fl sweep FILE --set replicates=N``) runs every point once
per seed on the same partition (``simulations.replicate_runs``): ``<label>/seed-<s>/``, and the
sweep report shows each point's between-run interval and compares neighbouring points.
"""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from panoramia_fl.simulations.experiment_config import (
    SEED_LIMIT,
    ConfigError,
    ExperimentConfig,
    apply_overrides,
    parse_override,
    validate_config,
)
from panoramia_fl.simulations.sizes import check_replicates

_ONE_OF = "give exactly one of grid (a product of values) or points (label -> overrides)"


class SweepConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "sweep"
    base: Path
    output_dir: Path = Path("runs")
    overrides: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, list[Any]] | None = None
    points: dict[str, dict[str, Any]] | None = None
    """Label -> dotted config key -> value, one run per label."""
    replicates: int = Field(1, ge=1)
    """Runs per point, seeds ``seed`` onwards on the point's partition (1: one run)."""

    @model_validator(mode="after")
    def _grid_or_points(self) -> SweepConfig:
        if (self.grid is None) == (self.points is None):
            raise ValueError(f"grid, points: {_ONE_OF}")
        if self.points is not None and not self.points:
            raise ValueError("points: needs at least one point")
        if self.grid is not None:
            if not self.grid:
                raise ValueError("grid: needs at least one key with its values")
            empty = [key for key, values in self.grid.items() if not values]
            if empty:
                raise ValueError(
                    f"grid: {', '.join(empty)} list{'s' * (len(empty) == 1)} no value, so the "
                    "grid has no point; give each key at least one value"
                )
        return self


def _normalise(value: Any) -> Any:
    if isinstance(value, str) and value.lower() in {"inf", "+inf", ".inf"}:
        return math.inf
    return value


def _safe(label: str) -> str:
    """A label as a directory name: characters other than these become ``_``."""
    return re.sub(r"[^A-Za-z0-9_.=+-]", "_", label)


def _label(point: dict[str, Any]) -> str:
    parts = []
    for key, value in point.items():
        text = "inf" if isinstance(value, float) and math.isinf(value) else str(value)
        parts.append(f"{key.split('.')[-1]}={text}")
    return _safe(",".join(parts))


def load_sweep(path: Path, overrides: list[str] | None = None) -> SweepConfig:
    """Read and validate a sweep file; ``overrides`` (``key=value``) set its own keys
    (``replicates=3``), as ``run --set`` sets a config's."""
    if not path.exists():
        raise ConfigError(f"sweep file not found: {path}")
    raw = yaml.safe_load(path.read_text()) or {}
    if overrides:
        raw = apply_overrides(raw, dict(parse_override(item) for item in overrides))
    try:
        sweep = SweepConfig.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        # A model-level check names its keys in its own message.
        msg = str(first["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"{path}: {key}: {msg}" if key else f"{path}: {msg}") from None
    base = sweep.base if sweep.base.is_absolute() else path.parent / sweep.base
    return sweep.model_copy(update={"base": base})


def _points(sweep: SweepConfig) -> list[tuple[str, dict[str, Any]]]:
    """(label, point overrides) of every point, in the file's order."""
    if sweep.points is not None:
        labelled = [
            (_safe(str(label)), {k: _normalise(v) for k, v in overrides.items()})
            for label, overrides in sweep.points.items()
        ]
    else:
        grid = sweep.grid or {}
        keys = list(grid)
        labelled = []
        for values in itertools.product(*(grid[k] for k in keys)):
            point = {k: _normalise(v) for k, v in zip(keys, values, strict=True)}
            labelled.append((_label(point), point))
    labels = [label for label, _ in labelled]
    repeated = sorted({x for x in labels if labels.count(x) > 1})
    if repeated:
        key = "points" if sweep.points is not None else "grid"
        raise ConfigError(
            f"{key}: point labels must stay distinct as directory names; repeated: {repeated}"
        )
    return labelled


def expand(sweep: SweepConfig) -> list[tuple[str, dict[str, Any], ExperimentConfig]]:
    """(label, overrides, validated config) for every point, validated up front."""
    if not sweep.base.exists():
        raise ConfigError(f"base: config file not found: {sweep.base}")
    base_raw = yaml.safe_load(sweep.base.read_text()) or {}
    points = []
    for label, point in _points(sweep):
        overrides = {k: _normalise(v) for k, v in sweep.overrides.items()} | point
        overrides["name"] = label
        try:
            config = validate_config(apply_overrides(base_raw, overrides))
            check_replicates(sweep.replicates, config.seed, key="replicates", seed_limit=SEED_LIMIT)
        except ConfigError as err:
            raise ConfigError(f"sweep point {label}: {err}") from None
        points.append((label, point, config))
    return points
