"""Model registry: architectures selected by name in the config (``model.name``).

Modalities add theirs with :func:`register_model`; :func:`build_model` builds one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from contracts.errors import UnknownNameError

ModelBuilder = Callable[..., torch.nn.Module]


@dataclass(frozen=True)
class ModelSpec:
    """A registered architecture: its modality and its builder."""

    name: str
    modality: str
    builder: ModelBuilder


_MODELS: dict[str, ModelSpec] = {}
_MODALITY_MODULES = (
    "ml.models.image",
    "ml.models.tabular",
    "ml.models.text",
)


def register_model(name: str, *, modality: str) -> Callable[[ModelBuilder], ModelBuilder]:
    """Register ``builder(*, num_classes, dp, **options)`` under ``name``."""

    def deco(builder: ModelBuilder) -> ModelBuilder:
        _MODELS[name] = ModelSpec(name=name, modality=modality, builder=builder)
        return builder

    return deco


def _load_builtins(until: str | None = None) -> None:
    """Import the modality modules (stopping once ``until`` is registered: the text module
    imports transformers, which an image run should not pay for)."""
    for module in _MODALITY_MODULES:
        if until is not None and until in _MODELS:
            return
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name != module:
                raise


def model_spec(name: str) -> ModelSpec:
    """Look up a registered model; the error names the config key and the known names."""
    if name not in _MODELS:
        _load_builtins(until=name)
    if name not in _MODELS:
        raise UnknownNameError(f"model.name: unknown model {name!r}; known: {sorted(_MODELS)}")
    return _MODELS[name]


def known_models() -> list[str]:
    _load_builtins()
    return sorted(_MODELS)
