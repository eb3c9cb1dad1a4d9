"""JSON values from Python results: the one rule for what JSON cannot hold.

JSON has no inf or NaN, so every writer of a run file, a report or a command's output turns
a non-finite float into ``null`` here. Standard library only: numpy scalars are recognised
by their ``item()`` method, not imported.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

View = Callable[[Any], Mapping[str, Any] | None]
"""The mapping an object is written as instead of its dataclass fields; None: no view of it."""


def json_safe(obj: Any, *, view: View | None = None) -> Any:
    """Plain JSON types from dataclasses, mappings, sequences, paths and numpy scalars;
    non-finite floats become None (``null``). ``view``: the mapping an object is written as,
    where it has one (at every depth)."""
    if view is not None and (shown := view(obj)) is not None:
        return {k: json_safe(v, view=view) for k, v in shown.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: json_safe(getattr(obj, f.name), view=view) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): json_safe(v, view=view) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v, view=view) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if type(obj).__module__ == "numpy" and hasattr(obj, "item"):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
