"""Attributes of Ray's and Flower's modules and classes swapped for a while: how the harness
changes what those libraries have no option for (each use says which attribute and why;
Flower pins Ray's version, and the project pins Flower's)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
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


@contextmanager
def swapped_arguments(
    owner: object, name: str, change: Callable[[inspect.BoundArguments], None]
) -> Iterator[None]:
    """``owner``'s function ``name`` called meanwhile with the arguments ``change`` edits
    (bound by name to the function's own signature, so that a call passing them by position
    or by keyword is changed alike)."""
    function = getattr(owner, name)
    parameters = inspect.signature(function)

    @functools.wraps(function)  # its signature, for a swap of the same function inside this one
    def changed(*args: Any, **kwargs: Any) -> Any:
        bound = parameters.bind(*args, **kwargs)
        change(bound)
        return function(*bound.args, **bound.kwargs)

    with swapped(owner, **{name: changed}):
        yield
