"""What a crafted model is, and the scale of the weights every attack sends.

A server that does not play fair keeps the agreed architecture and chooses the weights. The
attacks here write the **first fully connected layer** (its rows and biases) and the next
one (its columns); every layer before the first linear one is set so that the record
reaches it as whole as the architecture allows (:mod:`audit.adversary.passthrough`).

Scale matters twice, because the server reads the site's update, not its gradient:

* the site's optimizer turns gradients into a weight change. SGD (with or without momentum)
  is linear in them; Adam's first step is ``lr g / (|g| + eps)``, nearly ``lr sign(g)``
  for ordinary gradients, which keeps no ratio. Adam is linear only while ``|g| << eps``;
* the site sends float32 weights: a weight change far below a weight's own size is lost to
  rounding, and one near it moves the bins before the next local step (FedAvg).

:func:`calibrate` therefore scales the written layer, the next one and the one after it so
that a local step moves the first two by at most a hundredth of their size and, for Adam, keeps
their gradients a thousandth of ``eps``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

from panoramia_fl.audit.adversary.layers import AdversaryUnsupported, first_two, linear_layers
from panoramia_fl.audit.adversary.passthrough import PassThrough

__all__ = ["CraftedModel", "SiteOptimizer", "calibrate", "start"]


@dataclass(frozen=True)
class SiteOptimizer:
    """What the server knows of the sites' local step: the agreed optimizer and its rate."""

    name: Literal["sgd", "adam", "adamw"] = "adam"
    learning_rate: float = 1e-3
    eps: float = 1e-8
    """Adam's epsilon (torch's default)."""

    def largest_gradient(self) -> float:
        """The largest first-layer gradient the crafted weights aim for: a thousandth of
        Adam's ``eps`` (where Adam's step is still linear in the gradient), else 1."""
        return 1e-3 * self.eps if self.name != "sgd" else 1.0


@dataclass(frozen=True)
class CraftedModel:
    """The weights a dishonest server sends, and what it keeps to read the update."""

    attack: str
    """``imprint``, ``trap`` or ``dead``."""
    state_dict: dict[str, torch.Tensor]
    """What the server sends in place of the global model (same keys and shapes)."""
    layer: str
    """State-dict prefix of the written linear layer (``net.0``: ``net.0.weight``...)."""
    units: torch.Tensor
    """The layer's units the attack reads: for ``imprint`` in increasing bin threshold (the
    difference of neighbours isolates a bin), for ``trap`` every trap unit."""
    input_shape: tuple[int, ...]
    """One record's shape as the model reads it."""
    thresholds: torch.Tensor | None = None
    """``imprint``: each unit's bin edge on the measurement (public quantiles)."""
    passthrough: PassThrough | None = None
    """Image models: how the features the layer sees map back to an image."""
    notes: Mapping[str, float] = field(default_factory=dict)
    """Scales chosen while crafting (for the record; not needed to rebuild)."""


def _largest_gradients(
    model: nn.Module, public: torch.Tensor, *, batch: int, seed: int
) -> tuple[float, float]:
    """The largest gradient entry of the written layer and of the next one, over public
    batches of ``batch`` records with labels drawn at random (the server needs no labels:
    the loss's gradient is as large)."""
    _, first, second = first_two(model)
    generator = torch.Generator().manual_seed(seed)
    classes = linear_layers(model)[-1][1].out_features
    written, following = 0.0, 0.0
    model.train()
    for begin in range(0, len(public), batch):
        x = public[begin : begin + batch]
        y = torch.randint(classes, (len(x),), generator=generator)
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        assert first.weight.grad is not None and first.bias.grad is not None
        assert second.weight.grad is not None
        written = max(written, float(first.weight.grad.abs().max()))
        written = max(written, float(first.bias.grad.abs().max()))
        following = max(following, float(second.weight.grad.abs().max()))
    model.zero_grad(set_to_none=True)
    if written == 0.0:
        raise AdversaryUnsupported(
            "the crafted model's first linear layer gets no gradient on public records"
        )
    return written, following


def _size(layer: nn.Linear) -> float:
    """A layer's largest weight or bias: the one float32 rounds most coarsely."""
    return max(float(layer.weight.detach().abs().max()), float(layer.bias.detach().abs().max()))


MOVE = 1e-2
"""The share of its own size the largest crafted weight moves in one local step: far above
float32's rounding (1e-7) for most records' weight changes, small enough that a few steps
move few bin edges."""
MARGIN = 10.0
"""Site records may give larger gradients than public ones: this much headroom."""
STEPS_ABOVE_RESOLUTION = 1e4
"""The largest step on public records over the server's resolution (most records' steps
are one to two orders of magnitude smaller)."""


def calibrate(
    model: nn.Module,
    public: torch.Tensor,
    *,
    optimizer: SiteOptimizer,
    batch: int,
    seed: int,
    resolution: float = 0.0,
) -> dict[str, float]:
    """Scale, in place, the written layer (rows and biases: its units fire for the same
    records at any scale), the next layer (``v``) and, when there is one, the layer after
    it (``f``, which scales every gradient reaching the two), so that one local step moves
    the written and the next layer's weights by at most :data:`MOVE` of their size (a tenth
    of it on public records), and for Adam
    every gradient of the two stays :meth:`SiteOptimizer.largest_gradient` (where Adam's
    step is linear). The written layer's gradient grows with ``v f``, the next one's with
    ``s f`` (``s`` the written layer's scale): both moves fix ``f`` and ``v / s``, Adam's
    bound the rest. Without a layer after the next (the small CNN's head) only the first
    step is linear for Adam and the next layer moves from the second step on (FedAvg).

    ``resolution``: the smallest weight change the server can read (a secure sum's fixed
    point, ``2**-32``). Adam's linear steps are small (``lr`` times a ten-thousandth on
    public records); the bound is raised, at most to a tenth of ``eps``, until the largest
    step on public records is :data:`STEPS_ABOVE_RESOLUTION` times it."""
    _, first, second = first_two(model)
    linears = linear_layers(model)
    third = linears[2][1] if len(linears) > 2 else None
    rate = optimizer.learning_rate / (optimizer.eps if optimizer.name != "sgd" else 1.0)
    bound = optimizer.largest_gradient() / MARGIN
    if optimizer.name != "sgd" and resolution > 0:
        needed = STEPS_ABOVE_RESOLUTION * resolution * optimizer.eps / optimizer.learning_rate
        bound = min(max(bound, needed), 0.1 * optimizer.eps)
    factor = 1.0
    for _ in range(2):  # the second pass corrects what downstream ReLUs changed
        g_written, g_following = _largest_gradients(model, public, batch=batch, seed=seed)
        s = _size(first)
        v = float(second.weight.detach().abs().max())
        # Gradients per unit of scale: g_written = gw * v, g_following = gv * s (the
        # current f inside gw and gv; f below is a correction to it).
        gw, gv = g_written / v, max(g_following, 1e-30) / s
        if third is not None:
            f = MOVE / (rate * (gw * gv) ** 0.5) / MARGIN
            ratio = (gv / gw) ** 0.5  # v / s
            v_new = min(bound / (gw * f), 1.0) if optimizer.name != "sgd" else 1.0
            s_new = v_new / ratio
        else:
            f = 1.0
            v_new = min(bound / gw, 1.0) if optimizer.name != "sgd" else v
            s_new = rate * gw * v_new * MARGIN / MOVE
        with torch.no_grad():
            first.weight.mul_(s_new / s)
            first.bias.mul_(s_new / s)
            second.weight.mul_(v_new / v)
            if third is not None:
                third.weight.mul_(f)
        factor *= f
    return {"written_scale": s_new, "next_scale": v_new, "downstream_factor": factor}


def start(model: nn.Module) -> tuple[nn.Module, str, nn.Linear, nn.Linear]:
    """A copy of ``model`` to craft (the caller's stays as it was), its written layer's
    prefix, that layer and the next linear one."""
    crafted = copy.deepcopy(model).cpu().float()
    name, first, second = first_two(crafted)
    return crafted, name, first, second
