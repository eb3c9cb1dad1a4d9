"""Dotted config keys: ``--set key=value`` parsed and applied to a nested mapping, and the
dotted key named in every validation error."""

from __future__ import annotations

import math
from typing import Any

import yaml
from pydantic import ValidationError

from panoramia_fl.contracts.errors import UserError


class ConfigError(UserError, ValueError):
    """A config file or override is invalid; the message names the key."""


def format_validation_error(err: ValidationError) -> str:
    """One line per error of ``err``, each naming its dotted key (``fl.rounds: ...``)."""
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        # Whole-config checks name their keys themselves.
        lines.append(f"{key}: {msg}" if key else msg)
    return "; ".join(lines)


def parse_override(item: str) -> tuple[str, Any]:
    """``"fl.rounds=3"`` -> ("fl.rounds", 3); the value is parsed as YAML."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected key=value")
    key, raw = item.split("=", 1)
    value = yaml.safe_load(raw) if raw else None
    if isinstance(value, str) and value.lower() in {"inf", "+inf", ".inf"}:
        value = math.inf
    return key.strip(), value


def apply_overrides(raw: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Set dotted keys in a nested dict (copying), creating sections as needed."""
    out = yaml.safe_load(yaml.safe_dump(raw)) or {}
    for dotted, value in overrides.items():
        parts = dotted.split(".")
        node = out
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"{dotted}: {part!r} is not a section")
            node = child
        node[parts[-1]] = value
    return out
