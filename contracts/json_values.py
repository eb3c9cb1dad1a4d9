"""JSON values from Python results and back: the one rule for what JSON cannot hold, and the
one checked decoder of every typed record the project writes.

JSON has no inf or NaN, so every writer of a run file, a report or a command's output turns
a non-finite float into ``null`` here (:func:`json_safe`). Every reader of such a file turns
its JSON back into the dataclass it was written from (:func:`from_dict`), checking each key
against the type its field declares and naming the key's path when one does not fit.
Standard library only: numpy scalars are recognised by their ``item()`` method, not
imported.

How a field is laid out in JSON, when not as its own key, is its metadata: :data:`INLINE`
(its keys sit in its parent's object) or :data:`FLAT_IN_OLDER` (older files held them
there); a field renamed since older files were written names their key with
:func:`older_key`, and one whose Python name differs from its key in every file, older and
newer, names that key with :func:`json_key`. A float field that may be infinite says which
infinity its ``null`` was with ``Annotated[float, NullAs(...)]``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

View = Callable[[Any], Mapping[str, Any] | None]
"""The mapping an object is written as instead of its dataclass fields; None: no view of it."""

R = TypeVar("R")

JSON_LAYOUT = "json"
"""The field metadata key that says how a field is laid out in JSON."""
INLINE: Mapping[str, str] = types.MappingProxyType({JSON_LAYOUT: "inline"})
"""Field metadata: the field (a dataclass) writes its keys into its parent's object, and is
read from there."""
FLAT_IN_OLDER: Mapping[str, str] = types.MappingProxyType({JSON_LAYOUT: "flat_in_older"})
"""Field metadata: the field (a dataclass) has its own key, but older files held its keys in
its parent's object; without the key it is read from there."""

OLDER_KEY = "older_key"
"""The field metadata key that names the key older files held the field under."""


def older_key(name: str) -> Mapping[str, str]:
    """Field metadata: older files held the field under the key ``name``; without its own
    key it is read from there."""
    return types.MappingProxyType({OLDER_KEY: name})


JSON_KEY = "json_key"
"""The field metadata key that names the field's key in JSON when it is not its name."""


def json_key(name: str) -> Mapping[str, str]:
    """Field metadata: the field is written and read under the key ``name`` (the code
    renamed it; the files keep the key they were written with)."""
    return types.MappingProxyType({JSON_KEY: name})


def json_name(f: dataclasses.Field[Any]) -> str:
    """A field's key in JSON: its :func:`json_key`, else its name."""
    return str(f.metadata.get(JSON_KEY, f.name))


@dataclass(frozen=True)
class NullAs:
    """``Annotated[float, NullAs(value)]``: ``null`` in this float field reads as ``value``
    (an infinity :func:`json_safe` wrote as null). Without it, ``null`` in a ``float`` field
    reads as NaN (a non-finite number of unknown sign) and only an optional one reads None."""

    value: float


def dataclass_of(hint: Any) -> type | None:
    """The dataclass of a field typed ``X`` or ``X | None``, else None."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    for arg in (hint, *(typing.get_args(hint) if union else ())):
        if dataclasses.is_dataclass(arg) and isinstance(arg, type):
            return arg
    return None


def json_safe(obj: Any, *, view: View | None = None) -> Any:
    """Plain JSON types from dataclasses, mappings, sequences, paths and numpy scalars;
    non-finite floats become None (``null``). ``view``: the mapping an object is written as,
    where it has one (at every depth)."""
    if view is not None and (shown := view(obj)) is not None:
        return {k: json_safe(v, view=view) for k, v in shown.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(obj):
            value = json_safe(getattr(obj, f.name), view=view)
            if f.metadata.get(JSON_LAYOUT) == "inline" and isinstance(value, dict):
                out.update(value)
            else:
                out[json_name(f)] = value
        return out
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


def from_dict(cls: type[R], data: Any, where: str = "") -> R:
    """The record ``cls`` from its JSON value (the inverse of :func:`json_safe`).

    ``cls`` is a dataclass, or a generic one with its type arguments
    (``SiteAuditFile[SiteResults]``). Each field's value is checked against its type hint:
    ``int``, ``float`` (a finite number; ``null`` reads as NaN, or as :class:`NullAs` says),
    ``str``, ``bool``, ``Literal``, ``X | None``, ``list``, ``tuple``, ``dict`` (keys that
    are all digits, site ids or rounds, in numeric order; ``dict[int, X]`` reads them as
    numbers), nested dataclasses and ``Any`` (taken as it is). A key the file lacks takes
    the field's default (files older than it); a key the type lacks is ignored (files newer
    than it). A value the dataclass's own ``__post_init__`` refuses is an error too.

    Raises
    ------
    ValueError
        When ``data`` or a value in it does not fit, naming the key's path (after
        ``where``: a file name, ``result``, ...).
    """
    return typing.cast(R, _record(cls, data, where, {}))


Env = dict[Any, Any]
"""Type variables bound to their arguments (a generic record's)."""


@functools.cache
def _layout(cls: type) -> tuple[tuple[dataclasses.Field[Any], Any], ...]:
    """Each field of a dataclass with its type hint (``Annotated`` kept)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return tuple((f, hints[f.name]) for f in dataclasses.fields(cls))


def _record(hint: Any, data: Any, where: str, env: Env) -> Any:
    cls = typing.get_origin(hint) or hint
    bound = tuple(_bound(a, env) for a in typing.get_args(hint))
    env = dict(zip(getattr(cls, "__parameters__", ()), bound, strict=False))
    if not isinstance(data, dict):
        raise ValueError(f"{_named(where)} must be a JSON object, got {_shown(data)}")
    values = {}
    for f, field_hint in _layout(cls):
        own = json_name(f)
        name = f.metadata.get(OLDER_KEY, own) if own not in data else own
        key = f"{where}.{name}" if where else name
        layout = f.metadata.get(JSON_LAYOUT)
        if layout == "inline" or (layout == "flat_in_older" and own not in data):
            values[f.name] = _value(field_hint, data, where, env)
        elif name in data:
            values[f.name] = _value(field_hint, data[name], key, env)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ValueError(f"key '{key}' is missing")
    try:
        return cls(**values)
    except ValueError as err:  # the record's own checks (__post_init__)
        raise ValueError(f"{_named(where)}: {err}" if where else str(err)) from None


def _bound(hint: Any, env: Env) -> Any:
    return env.get(hint, hint) if isinstance(hint, TypeVar) else hint


def _value(hint: Any, value: Any, key: str, env: Env) -> Any:
    hint = _bound(hint, env)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        null = next((a for a in args[1:] if isinstance(a, NullAs)), None)
        return (
            null.value if value is None and null is not None else _value(args[0], value, key, env)
        )
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        present = [a for a in args if a is not type(None)]
        if value is None and len(present) < len(args):
            return None
        if len(present) != 1:
            raise TypeError(f"key '{key}': cannot decode the union {hint!r}")
        return _value(present[0], value, key, env)
    if origin is typing.Literal:
        if not any(value == a and type(value) is type(a) for a in args):
            raise ValueError(f"key '{key}' must be one of {list(args)}, got {_shown(value)}")
        return value
    if origin in (list, tuple):
        return _sequence(origin, args, value, key, env)
    if origin is dict:
        return _mapping(args, value, key, env)
    if dataclasses.is_dataclass(origin or hint):
        return _record(hint, value, key, env)
    return _scalar(hint, value, key)


def _sequence(origin: type, args: tuple[Any, ...], value: Any, key: str, env: Env) -> Any:
    if not isinstance(value, list):
        raise ValueError(f"key '{key}' must be a list, got {_shown(value)}")
    if origin is list:
        return [_value(args[0], v, f"{key}[{i}]", env) for i, v in enumerate(value)]
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_value(args[0], v, f"{key}[{i}]", env) for i, v in enumerate(value))
    if len(value) != len(args):
        raise ValueError(f"key '{key}' must be a list of {len(args)}, got {len(value)}")
    return tuple(_value(a, v, f"{key}[{i}]", env) for i, (a, v) in enumerate(zip(args, value)))


def _mapping(args: tuple[Any, ...], value: Any, key: str, env: Env) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"key '{key}' must be a JSON object, got {_shown(value)}")
    items = list(value.items())
    if all(str(k).isdigit() for k, _ in items):  # site ids or rounds: in numeric order
        items.sort(key=lambda kv: int(kv[0]))
    elif args[0] is int:
        raise ValueError(f"key '{key}' must be keyed by numbers, got {[k for k, _ in items]}")
    read = int if args[0] is int else str
    return {read(k): _value(args[1], v, f"{key}.{k}", env) for k, v in items}


def _scalar(hint: Any, value: Any, key: str) -> Any:
    if hint is bool:
        if not isinstance(value, bool):
            raise ValueError(f"key '{key}' must be true or false, got {_shown(value)}")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise ValueError(f"key '{key}' must be a string, got {_shown(value)}")
        return value
    if hint not in (int, float):
        raise TypeError(f"key '{key}': cannot decode the type {hint!r}")
    if hint is float and value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, int | float):
        what = "an integer" if hint is int else "a number"
        raise ValueError(f"key '{key}' must be {what}, got {_shown(value)}")
    if not math.isfinite(value):
        raise ValueError(f"key '{key}' must be finite, got {value!r}")
    if hint is int:
        if value != int(value):
            raise ValueError(f"key '{key}' must be an integer, got {value!r}")
        return int(value)
    return float(value)


def _named(where: str) -> str:
    return f"key '{where}'" if where else "the record"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
