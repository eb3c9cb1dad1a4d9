"""Attributes of Ray's and Flower's modules and classes swapped for a while: how the harness
changes what those libraries have no option for (each use says which attribute and why;
Flower pins Ray's version, and the project pins Flower's)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def swapped(owner: object, **values: Any) -> Iterator[None]:
    """``owner``'s attributes set to ``values`` meanwhile, each as it was afterwards, also
    when the block raises. Nested swaps of the same attribute unwind in order."""
    originals = {name: getattr(owner, name) for name in values}
    for name, value in values.items():
        setattr(owner, name, value)
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(owner, name, original)
