"""What a crafted model is and the parts every attack shares: the layer it writes, the
convolutions it turns into a pass-through, and the scale of the weights it sends.

A server that does not play fair keeps the agreed architecture and chooses the weights. The
attacks here write the **first fully connected layer** (its rows and biases) and the next
one (its columns); every layer before the first linear one is set so that the record
reaches it as unchanged as the architecture allows (:func:`pass_through`).

Scale matters twice, because the server reads the site's update, not its gradient:

* the site's optimizer turns gradients into a weight change. SGD (with or without momentum)
  is linear in them; Adam's first step is ``lr g / (|g| + eps)``, nearly ``lr sign(g)``
  for ordinary gradients, which keeps no ratio. Adam is linear only while ``|g| << eps``;
* the site sends float32 weights: a weight change far below a weight's own size is lost to
  rounding, and one near it moves the bins before the next local step (FedAvg).

:func:`calibrate` therefore scales the written layer, the next one and the one after it so
that a local step moves the first two by a thousandth of their size and, for Adam, keeps
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

from contracts.errors import UserError

__all__ = [
    "AdversaryUnsupported",
    "CraftedModel",
    "PassThrough",
    "SiteOptimizer",
    "calibrate",
    "features",
    "linear_layers",
    "pass_through",
]


class AdversaryUnsupported(UserError, ValueError):
    """The attack cannot be crafted for this model (its layers say why)."""


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
class PassThrough:
    """How an image reaches the first linear layer of a crafted image model, and back.

    Every convolution copies its first input channel (an identity kernel), every norm layer
    shifts its output positive (so the ReLUs pass it) and every 2x2 max-pool keeps the
    maximum: the linear layer sees ``scale * maxpool_f(x) + offset`` on each channel, with
    ``f`` the architecture's total pooling factor; ``scale`` and ``offset`` are fitted on
    public images (batch-norm in training mode rescales by the batch's statistics, so the
    affine map holds up to the batch: :func:`pass_through`)."""

    factor: int
    """Input pixels per side of one feature (4 for the small CNN: 28x28 comes back 7x7)."""
    channels: int
    """Channels the linear layer sees (each a copy of the pooled image)."""
    scale: float
    offset: float

    def to_image(self, rows: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        """Feature rows ``(n, C*h*w)`` back to images ``(n, *shape)`` in the input's range:
        channels averaged, the affine map undone, each feature repeated ``factor`` times
        per side (nearest neighbour: the resolution that came back, no more)."""
        side = shape[-1] // self.factor
        maps = rows.reshape(len(rows), self.channels, -1, side).mean(dim=1, keepdim=True)
        image = (maps - self.offset) / self.scale
        image = image.repeat_interleave(self.factor, dim=2).repeat_interleave(self.factor, dim=3)
        return image.expand(-1, shape[0], -1, -1).clamp(-1.0, 1.0)

    def comes_back(self, images: torch.Tensor) -> torch.Tensor:
        """What the architecture lets through of ``images``: each ``factor`` x ``factor``
        block's maximum, repeated over the block (the best any rebuild can do)."""
        pooled = F.max_pool2d(images.float(), self.factor)
        return pooled.repeat_interleave(self.factor, dim=2).repeat_interleave(self.factor, dim=3)


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


def linear_layers(model: nn.Module) -> list[tuple[str, nn.Linear]]:
    """The model's linear layers in definition order (the forward order of the project's
    models), with their state-dict prefixes."""
    return [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]


def _first_two(model: nn.Module) -> tuple[str, nn.Linear, nn.Linear]:
    linears = linear_layers(model)
    if len(linears) < 2:
        raise AdversaryUnsupported(
            f"{type(model).__name__}: the attacks write a linear layer and the one after it; "
            f"this model has {len(linears)} linear layer(s)"
        )
    return linears[0][0], linears[0][1], linears[1][1]


_NORMS = (nn.BatchNorm2d, nn.GroupNorm)
_PASSED = (nn.Conv2d, *_NORMS, nn.ReLU, nn.MaxPool2d, nn.Flatten, nn.Sequential)
POSITIVE_SHIFT = 8.0
"""What each norm layer adds so that standardised pixels stay positive through the ReLU."""


def pass_through(model: nn.Module, first: nn.Linear, public: torch.Tensor) -> PassThrough | None:
    """Set every layer before ``first`` so that the record reaches it (see
    :class:`PassThrough`); ``None`` when ``first`` reads the record itself (the MLP).

    Raises :class:`AdversaryUnsupported` for a layer it cannot set (e.g. a residual block)."""
    before: list[nn.Module] = []
    for module in model.modules():
        if module is first:
            break
        if module is not model:
            before.append(module)
    if not any(isinstance(m, nn.Conv2d) for m in before):
        return None
    for module in before:
        if not isinstance(module, _PASSED):
            raise AdversaryUnsupported(
                f"{type(model).__name__}: cannot make {type(module).__name__} pass the image "
                "through (convolutions, norms, ReLU and max-pooling only)"
            )
    with torch.no_grad():
        for module in before:
            if isinstance(module, nn.Conv2d):
                kh, kw = module.kernel_size
                module.weight.zero_()
                module.weight[:, 0, kh // 2, kw // 2] = 1.0
                if module.bias is not None:
                    module.bias.zero_()
            elif isinstance(module, _NORMS) and module.weight is not None:
                module.weight.fill_(1.0)
                module.bias.fill_(POSITIVE_SHIFT)
    sees = features(model, first, public)
    factor = public.shape[-1] // round((sees.shape[1] / first_channels(model, first)) ** 0.5)
    channels = first_channels(model, first)
    pooled = F.max_pool2d(public.float(), factor)[:, :1].flatten(1)
    mapped = sees.reshape(len(public), channels, -1)[:, 0]
    # Least squares of mapped on pooled: the affine map batch statistics made.
    design = torch.stack([pooled.flatten(), torch.ones(pooled.numel())], dim=1)
    solution = torch.linalg.lstsq(design.double(), mapped.flatten()[:, None].double()).solution
    return PassThrough(
        factor=factor,
        channels=channels,
        scale=float(solution[0, 0]),
        offset=float(solution[1, 0]),
    )


def first_channels(model: nn.Module, first: nn.Linear) -> int:
    """Channels of the feature map ``first`` reads: the last convolution's output."""
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    return convs[-1].out_channels if convs else 1


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


def _largest_gradients(
    model: nn.Module, public: torch.Tensor, *, batch: int, seed: int
) -> tuple[float, float]:
    """The largest gradient entry of the written layer and of the next one, over public
    batches of ``batch`` records with labels drawn at random (the server needs no labels:
    the loss's gradient is as large)."""
    _, first, second = _first_two(model)
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


MOVE = 1e-2
"""The share of its own size a crafted weight moves in one local step: far above float32's
rounding (1e-7), far below what would move a bin's edge by a bin."""
MARGIN = 10.0
"""Site records may give larger gradients than public ones: this much headroom."""


def calibrate(
    model: nn.Module,
    public: torch.Tensor,
    *,
    optimizer: SiteOptimizer,
    batch: int,
    seed: int,
) -> dict[str, float]:
    """Scale, in place, the written layer (rows and biases: its units fire for the same
    records at any scale), the next layer (``v``) and, when there is one, the layer after
    it (``f``, which scales every gradient reaching the two), so that one local step moves
    the written and the next layer's weights by :data:`MOVE` of their size, and for Adam
    every gradient of the two stays :meth:`SiteOptimizer.largest_gradient` (where Adam's
    step is linear). The written layer's gradient grows with ``v f``, the next one's with
    ``s f`` (``s`` the written layer's scale): both moves fix ``f`` and ``v / s``, Adam's
    bound the rest. Without a layer after the next (the small CNN's head) only the first
    step is linear for Adam and the next layer moves from the second step on (FedAvg)."""
    _, first, second = _first_two(model)
    linears = linear_layers(model)
    third = linears[2][1] if len(linears) > 2 else None
    rate = optimizer.learning_rate / (optimizer.eps if optimizer.name != "sgd" else 1.0)
    bound = optimizer.largest_gradient() / MARGIN
    with torch.no_grad():
        first_scale = float(first.weight.detach().abs().max())
        first.weight.div_(first_scale)
        first.bias.div_(first_scale)
    factor = 1.0
    for _ in range(2):  # the second pass corrects what downstream ReLUs changed
        g_written, g_following = _largest_gradients(model, public, batch=batch, seed=seed)
        s = float(first.weight.detach().abs().max())
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
    name, first, second = _first_two(crafted)
    return crafted, name, first, second
