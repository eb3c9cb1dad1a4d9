"""Sweeps: a base config plus a grid of overrides; each point is a normal run directory.

```yaml
name: dp_sweep
base: default.yaml            # relative to this file
output_dir: runs              # sweep folder: <output_dir>/<name>
overrides: {fl.rounds: 3}     # applied to every point
grid:
  dp.target_epsilon: [1, inf]
  seed: [0]
```
"""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simulations.config import ConfigError, ExperimentConfig, apply_overrides, validate_config


class SweepConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "sweep"
    base: Path
    output_dir: Path = Path("runs")
    overrides: dict[str, Any] = Field(default_factory=dict)
    grid: dict[str, list[Any]]


def _normalise(value: Any) -> Any:
    if isinstance(value, str) and value.lower() in {"inf", "+inf", ".inf"}:
        return math.inf
    return value


def _label(point: dict[str, Any]) -> str:
    parts = []
    for key, value in point.items():
        text = "inf" if isinstance(value, float) and math.isinf(value) else str(value)
        parts.append(f"{key.split('.')[-1]}={text}")
    return re.sub(r"[^A-Za-z0-9_.=+-]", "_", ",".join(parts))


def load_sweep(path: Path) -> SweepConfig:
    if not path.exists():
        raise ConfigError(f"sweep file not found: {path}")
    raw = yaml.safe_load(path.read_text()) or {}
    try:
        sweep = SweepConfig.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{path}: {key}: {first['msg']}") from None
    base = sweep.base if sweep.base.is_absolute() else path.parent / sweep.base
    return sweep.model_copy(update={"base": base})


def expand(sweep: SweepConfig) -> list[tuple[str, dict[str, Any], ExperimentConfig]]:
    """(label, overrides, validated config) for every grid point, validated up front."""
    if not sweep.base.exists():
        raise ConfigError(f"base: config file not found: {sweep.base}")
    base_raw = yaml.safe_load(sweep.base.read_text()) or {}
    keys = list(sweep.grid)
    points = []
    for values in itertools.product(*(sweep.grid[k] for k in keys)):
        point = {k: _normalise(v) for k, v in zip(keys, values, strict=True)}
        label = _label(point)
        overrides = {k: _normalise(v) for k, v in sweep.overrides.items()} | point
        overrides["name"] = label
        try:
            config = validate_config(apply_overrides(base_raw, overrides))
        except ConfigError as err:
            raise ConfigError(f"sweep point {label}: {err}") from None
        points.append((label, point, config))
    return points
