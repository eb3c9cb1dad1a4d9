"""Dataset registry. Every loader reads local files only; nothing downloads.

A loader is registered by name (:data:`DATASETS`) with the pydantic model of its options,
so a bad option is an error that names ``data.options.<key>``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from panoramia_fl.contracts.errors import UserError
from panoramia_fl.contracts.plugins import PluginError, qualified_name
from panoramia_fl.contracts.registry import Registry


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


def check_loader(name: str, loader: Loader) -> None:
    """Refuse a loader that cannot be called as ``loader(root, options)``."""
    try:
        inspect.signature(loader).bind(None, LoaderOptions())
    except (TypeError, ValueError):
        raise PluginError(
            f"dataset {name!r}: loader {qualified_name(loader)} must take (root, options) "
            "and return ml.datasets.Dataset"
        ) from None


DATASETS: Registry[Loader] = Registry(
    "dataset",
    config_key="data.name",
    builtins={
        **dict.fromkeys(
            ("fashion_mnist", "mnist", "cifar10", "digits"), "panoramia_fl.ml.datasets.image"
        ),
        **dict.fromkeys(("image_folder", "npz"), "panoramia_fl.ml.datasets.image_files"),
        **dict.fromkeys(("randhie", "csv"), "panoramia_fl.ml.datasets.tabular"),
        **dict.fromkeys(("bible", "text_files"), "panoramia_fl.ml.datasets.text"),
    },
    check=check_loader,
)
"""``load(root, options) -> Dataset`` by ``data.name``, registered with the pydantic model
of its options: ``@DATASETS.register(name, options=...)``."""


def parse_options(name: str, options: dict[str, Any]) -> LoaderOptions:
    """Validate ``data.options`` for loader ``name``; errors name the offending key."""
    options_model: type[LoaderOptions] = DATASETS.meta(name).get("options", LoaderOptions)
    try:
        return options_model(**options)
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise DataError(f"data.options.{key}: {first['msg']}") from None


def load_dataset(
    name: str, *, root: Path | None = None, options: dict[str, Any] | None = None
) -> Dataset:
    """Load a registered dataset from local files (a loader that returns anything but a
    :class:`Dataset` is an error naming it; its labels checked: :func:`check_labels`)."""
    dataset = DATASETS.get(name)(root, parse_options(name, options or {}))
    if not isinstance(dataset, Dataset):
        raise DataError(
            f"data.name: loader {name!r} returned {type(dataset).__name__}, not ml.datasets.Dataset"
        )
    check_labels(dataset)
    return dataset


def check_labels(dataset: Dataset) -> None:
    """A labelled dataset must make a task: at least two classes among the records the sites
    train on, and every label (pool and public) in ``0 .. num_classes - 1``."""
    if dataset.y is None:
        return  # language modelling: the next token is the label
    where = f"data: {dataset.name} ({dataset.info.get('source', 'built in')})"
    for part, y in (("record", dataset.y), ("public record", dataset.public_y)):
        if y is not None and len(y) and (y.min() < 0 or y.max() >= dataset.num_classes):
            bad = y[(y < 0) | (y >= dataset.num_classes)]
            raise DataError(
                f"{where}: a {part} has label {int(bad[0])}, outside the {dataset.num_classes} "
                f"classes 0..{dataset.num_classes - 1}"
            )
    present = np.unique(dataset.y)
    if dataset.num_classes < 2 or len(present) < 2:
        raise DataError(
            f"{where}: the records sites train on hold {len(present)} class"
            f"{'es' * (len(present) != 1)}; a classifier needs at least two (one class "
            "trains to accuracy 1.0 and leaves nothing to audit)"
        )
