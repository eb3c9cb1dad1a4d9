"""Model registry: architectures selected by name in the config (``model.name``).

Modalities add theirs with ``@MODELS.register(name, modality=...)``; a task builds one
(:meth:`ml.tasks.TorchTask.make_model`). A plugin registers its own the same way (see
docs/plugins.md); a builder that cannot take the arguments below is refused as it registers.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from panoramia_fl.contracts.errors import UserError
from panoramia_fl.contracts.plugins import PluginError, qualified_name
from panoramia_fl.contracts.registry import Registry

ModelBuilder = Callable[..., torch.nn.Module]
"""``builder(*, num_classes, dp, input_shape, **options)``."""

BUILDER_ARGUMENTS = ("num_classes", "dp", "input_shape")
"""What every model builder is called with, by keyword; ``model.options`` come beside them."""


def _keyword_parameters(fn: Callable[..., Any]) -> tuple[set[str], bool, set[str]]:
    """(names it takes by keyword, whether it takes ``**kwargs``, names it requires)."""
    params = inspect.signature(fn).parameters.values()
    by_keyword = {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    var_keyword = any(p.kind is p.VAR_KEYWORD for p in params)
    required = {
        p.name
        for p in params
        if p.default is p.empty and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    }
    return by_keyword, var_keyword, required


def check_builder(name: str, builder: ModelBuilder) -> None:
    """Refuse a builder that cannot be called as ``builder(num_classes=, dp=, input_shape=)``
    (naming what it lacks or also requires)."""
    if not callable(builder):
        raise PluginError(f"model {name!r}: {builder!r} is not callable")
    by_keyword, var_keyword, required = _keyword_parameters(builder)
    lacks = [a for a in BUILDER_ARGUMENTS if a not in by_keyword and not var_keyword]
    extra = sorted(required - set(BUILDER_ARGUMENTS))
    if lacks or extra:
        why = f"lacks {', '.join(lacks)}" if lacks else f"also requires {', '.join(extra)}"
        raise PluginError(
            f"model {name!r}: builder {qualified_name(builder)} must take the keyword "
            f"arguments {', '.join(BUILDER_ARGUMENTS)} (model.options beside them, with "
            f"defaults); it {why}"
        )


MODELS: Registry[ModelBuilder] = Registry(
    "model",
    config_key="model.name",
    builtins={
        "small_cnn": "panoramia_fl.ml.models.image",
        "resnet18": "panoramia_fl.ml.models.image",
        "mlp": "panoramia_fl.ml.models.tabular",
        "gpt2_small": "panoramia_fl.ml.models.text",
        "hf_causal_lm": "panoramia_fl.ml.models.hf_causal_lm",
    },
    check=check_builder,
)


def build_model(name: str, **arguments: Any) -> torch.nn.Module:
    """``MODELS[name](**arguments)``; arguments the builder does not take (a misspelt
    ``model.options`` key) are an error naming them, and so is a builder that returns
    something other than a ``torch.nn.Module``."""
    builder = MODELS.get(name)
    by_keyword, var_keyword, _ = _keyword_parameters(builder)
    unknown = sorted(set(arguments) - by_keyword) if not var_keyword else []
    if unknown:
        known = sorted(by_keyword - set(BUILDER_ARGUMENTS))
        raise UserError(
            f"model.options: {', '.join(unknown)} not taken by model {name!r} "
            f"({qualified_name(builder)}; its options: {known or 'none'})"
        )
    model = builder(**arguments)
    if not isinstance(model, torch.nn.Module):
        raise UserError(
            f"model.name: builder {qualified_name(builder)} of {name!r} returned "
            f"{type(model).__name__}, not a torch.nn.Module"
        )
    return model


def check_private(model: torch.nn.Module, name: str) -> None:
    """Refuse a model Opacus cannot train under DP-SGD, naming each offending layer with the
    first sentence of Opacus's validator's reason (e.g. BatchNorm: batch statistics mix
    records)."""
    from opacus.utils.module_utils import trainable_modules
    from opacus.validators import ModuleValidator

    problems = []
    for layer, module in trainable_modules(model):
        validator = ModuleValidator.VALIDATORS.get(type(module))
        for error in validator(module) if validator is not None else ():
            reason = str(error).split(". ")[0].rstrip(".")
            problems.append(f"layer {layer!r} ({type(module).__name__}): {reason}")
    if problems:
        raise UserError(
            f"model.name: {name!r} cannot be trained under record-level DP (Opacus): "
            + "; ".join(problems)
            + " (build DP-safe layers when the builder's dp is true, e.g. GroupNorm)"
        )
