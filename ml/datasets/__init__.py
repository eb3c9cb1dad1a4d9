"""Dataset registry. Every loader reads local files only; nothing downloads.

A loader is registered by name with the pydantic model of its options, so a bad option is
an error that names ``data.options.<key>``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from contracts.errors import UnknownNameError, UserError


class DataError(UserError, ValueError):
    """A data file is missing, corrupt or does not fit the config; the message says which."""


@dataclass(frozen=True)
class Dataset:
    """Records of one dataset, ready to be partitioned into sites.

    ``x``/``y`` are the pool the sites draw from. ``sites`` is a natural site column (one id
    per record) when the data has one; ``groups`` keeps records of one unit (e.g. the chunks
    of one document) together in one site and one split. ``public`` holds records no site
    ever trains on (e.g. an official test split): central evaluation and reference pools.
    """

    name: str
    modality: str
    x: np.ndarray
    y: np.ndarray | None
    num_classes: int
    input_shape: tuple[int, ...]
    public_x: np.ndarray | None = None
    public_y: np.ndarray | None = None
    sites: np.ndarray | None = None
    groups: np.ndarray | None = None
    public_groups: np.ndarray | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(len(self.x))


class LoaderOptions(BaseModel):
    """Base of every loader's options (unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


Loader = Callable[[Path | None, Any], Dataset]


@dataclass(frozen=True)
class LoaderSpec:
    name: str
    options: type[LoaderOptions]
    load: Loader


_LOADERS: dict[str, LoaderSpec] = {}
_MODALITY_MODULES = (
    "ml.datasets.image",
    "ml.datasets.tabular",
    "ml.datasets.text",
)


def register_dataset(
    name: str, *, options: type[LoaderOptions] = LoaderOptions
) -> Callable[[Loader], Loader]:
    """Register ``load(root, options) -> Dataset`` under ``name`` (config ``data.name``)."""

    def deco(load: Loader) -> Loader:
        _LOADERS[name] = LoaderSpec(name=name, options=options, load=load)
        return load

    return deco


def _load_builtins() -> None:
    for module in _MODALITY_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name != module:
                raise


def loader_spec(name: str) -> LoaderSpec:
    if name not in _LOADERS:
        _load_builtins()
    if name not in _LOADERS:
        raise UnknownNameError(f"data.name: unknown dataset {name!r}; known: {sorted(_LOADERS)}")
    return _LOADERS[name]


def parse_options(name: str, options: dict[str, Any]) -> LoaderOptions:
    """Validate ``data.options`` for loader ``name``; errors name the offending key."""
    spec = loader_spec(name)
    try:
        return spec.options(**options)
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise DataError(f"data.options.{key}: {first['msg']}") from None


def load_dataset(
    name: str, *, root: Path | None = None, options: dict[str, Any] | None = None
) -> Dataset:
    """Load a registered dataset from local files."""
    spec = loader_spec(name)
    return spec.load(root, parse_options(name, options or {}))


def known_datasets() -> list[str]:
    _load_builtins()
    return sorted(_LOADERS)
