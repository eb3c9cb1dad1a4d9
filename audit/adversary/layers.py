"""The layers a crafted model writes, found in the agreed architecture, and what the first
fully connected one reads."""

from __future__ import annotations

import torch
from torch import nn

from panoramia_fl.contracts.errors import UserError

__all__ = ["AdversaryUnsupported", "features", "first_two", "linear_layers"]


class AdversaryUnsupported(UserError, ValueError):
    """The attack cannot be crafted for this model (its layers say why)."""


def linear_layers(model: nn.Module) -> list[tuple[str, nn.Linear]]:
    """The model's linear layers in definition order (the forward order of the project's
    models), with their state-dict prefixes."""
    return [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]


def first_two(model: nn.Module) -> tuple[str, nn.Linear, nn.Linear]:
    """The written layer's prefix, the written layer and the linear layer after it."""
    linears = linear_layers(model)
    if len(linears) < 2:
        raise AdversaryUnsupported(
            f"{type(model).__name__}: the attacks write a linear layer and the one after it; "
            f"this model has {len(linears)} linear layer(s)"
        )
    return linears[0][0], linears[0][1], linears[1][1]


def features(model: nn.Module, layer: nn.Linear, records: torch.Tensor) -> torch.Tensor:
    """What ``layer`` reads for each record ``(n, in_features)``, the model in training
    mode (as a site trains it: batch-norm on the batch's statistics)."""
    seen: list[torch.Tensor] = []
    hook = layer.register_forward_pre_hook(lambda _m, args: seen.append(args[0].detach()))
    was_training = model.training
    try:
        model.train()
        with torch.no_grad():
            model(records)
    finally:
        hook.remove()
        model.train(was_training)
    return seen[0]
