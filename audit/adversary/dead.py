"""The dead model: every ReLU off on any record, so a site's local training changes nothing.

In the inconsistency attack (Pasquini, Francati and Ateniese, CCS 2022) the server sends
the target site a model of its choice and every other site this one: their updates are
zero, and a securely aggregated sum is the target's update alone.

Every norm layer's shift and every hidden linear layer's bias are set far below anything
the layer can receive, so each ReLU after them outputs 0 and passes no gradient back. What
is left is the output layer's bias: the logits are constant, and its gradient is the mean
of ``softmax(bias) - onehot(label)`` over the batch, the site's label shares only. Every
other parameter's update is exactly zero (Adam's too: a zero gradient is a zero step).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from panoramia_fl.audit.adversary.crafted import CraftedModel, start
from panoramia_fl.audit.adversary.layers import AdversaryUnsupported, linear_layers

__all__ = ["craft_dead"]

_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm)
HEADROOM = 10.0
"""How far beyond the largest input seen on public records a layer stays dead."""
STANDARDISED_BOUND = 1e3
"""Above any standardised value a norm layer outputs (at most the square root of the
values it normalises together)."""


def _inputs_bound(model: nn.Module, public: torch.Tensor) -> dict[nn.Linear, float]:
    """The largest absolute input each linear layer receives from ``public``."""
    bound: dict[nn.Linear, float] = {}
    hooks = [
        layer.register_forward_pre_hook(
            lambda m, args: bound.__setitem__(m, float(args[0].abs().max()))
        )
        for _, layer in linear_layers(model)
    ]
    try:
        with torch.no_grad():
            model.train()
            model(public)
    finally:
        for hook in hooks:
            hook.remove()
    return bound


def craft_dead(model: nn.Module, *, public: torch.Tensor, seed: int = 0) -> CraftedModel:
    """A model of ``model``'s architecture whose update on any record is zero but for its
    output layer's bias (see the module docstring).

    ``public``: public records, to size the biases (each ``HEADROOM`` times beyond the
    largest input seen there) and to check the result: it raises
    :class:`AdversaryUnsupported` if any other parameter gets a gradient on them.
    """
    crafted, name, _, _ = start(model)
    public = public.float()
    linears = linear_layers(crafted)
    with torch.no_grad():
        for module in crafted.modules():
            if isinstance(module, _NORMS) and getattr(module, "bias", None) is not None:
                module.bias.fill_(-(float(module.weight.abs().max()) * STANDARDISED_BOUND + 1))
        # Layer by layer: a layer's input bound is what the layers before it now give.
        for _, layer in linears[:-1]:
            bound = HEADROOM * _inputs_bound(crafted, public)[layer]
            layer.bias.copy_(-(layer.weight.abs().sum(dim=1) * bound + 1.0))
    _check_dead(crafted, public, output_bias=f"{linears[-1][0]}.bias", seed=seed)
    return CraftedModel(
        attack="dead",
        state_dict={key: v.detach().clone() for key, v in crafted.state_dict().items()},
        layer=name,
        units=torch.zeros(0, dtype=torch.long),
        input_shape=tuple(public.shape[1:]),
    )


def _check_dead(model: nn.Module, public: torch.Tensor, *, output_bias: str, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    classes = linear_layers(model)[-1][1].out_features
    model.train()
    model.zero_grad(set_to_none=True)
    labels = torch.randint(classes, (len(public),), generator=generator)
    F.cross_entropy(model(public), labels).backward()
    alive = [
        key
        for key, p in model.named_parameters()
        if key != output_bias and p.grad is not None and bool(p.grad.any())
    ]
    model.zero_grad(set_to_none=True)
    if alive:
        raise AdversaryUnsupported(
            f"{type(model).__name__}: the dead model still gets gradients in {alive[:3]}"
        )
