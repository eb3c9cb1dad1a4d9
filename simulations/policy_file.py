"""A release policy's YAML file (``panoramia-fl gate --policy``, ``report.policy``), read
into :class:`reporting.gate.gate_policy.GatePolicy`: a bad file or key is one
:class:`~simulations.config_keys.ConfigError` naming the file and the dotted key."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from panoramia_fl.reporting.gate.gate_policy import GatePolicy
from panoramia_fl.simulations.config_keys import ConfigError, format_validation_error


def load_policy(path: Path) -> GatePolicy:
    """The policy in ``path``; a :class:`ConfigError` naming the file and key."""
    if not path.is_file():
        raise ConfigError(f"policy file not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping (name, rules, requirements)")
    try:
        return GatePolicy.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(f"{path}: {format_validation_error(err)}") from None
