"""Image classifiers: a small CNN for 28x28 inputs and a ResNet-18 adapted to small images.

With ``dp=True`` every BatchNorm becomes GroupNorm: Opacus needs per-sample gradients, which
BatchNorm's batch statistics do not have.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from panoramia_fl.contracts.errors import UserError
from panoramia_fl.ml.models import MODELS


class _MaxPool2x2(torch.autograd.Function):
    """2x2 max-pooling (stride 2) as three elementwise maxima of the input's four strided
    quarters; the gradient by PyTorch's own max-pool backward, from the same indices."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        q00, q01, q10, q11 = _quarters(x)
        out = torch.maximum(torch.maximum(q00, q01), torch.maximum(q10, q11))
        # The kernel's index: the first maximum in scan order (q00, q01, q10, q11).
        after00 = q00 != out
        after01 = (q01 != out).logical_and_(after00)
        after10 = (q10 != out).logical_and_(after01)
        width = x.shape[-1]
        rows, cols = out.shape[-2:]
        corner = torch.arange(rows)[:, None] * (2 * width) + torch.arange(cols) * 2
        index = after01.to(torch.int64).mul_(width - 1)
        index.add_(after00).add_(after10).add_(corner)
        ctx.save_for_backward(x, index)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        x, index = ctx.saved_tensors
        return torch.ops.aten.max_pool2d_with_indices_backward(
            grad, x, [2, 2], [2, 2], [0, 0], [1, 1], False, index
        )


def _quarters(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The top-left, top-right, bottom-left and bottom-right element of every 2x2 window."""
    rows, cols = x.shape[-2] // 2 * 2, x.shape[-1] // 2 * 2
    return tuple(x[..., i:rows:2, j:cols:2] for i in (0, 1) for j in (0, 1))


class MaxPool2x2(nn.MaxPool2d):
    """:class:`torch.nn.MaxPool2d` ``(2)`` computed, on the CPU, from strided views.

    PyTorch's CPU max-pool kernel visits one output element at a time in NCHW memory: it
    took about a fifth of the small CNN's training step and a third of its inference.
    Elementwise maxima of the four quarters are vectorised (about 10x faster forward, 1.5x
    with the indices a training step needs). A maximum is exact and the index is the
    kernel's (the first maximum of the window), so outputs and gradients are bit for bit
    those of ``nn.MaxPool2d(2)`` for inputs without NaN (``tests/test_exact_speedups.py``).
    """

    def __init__(self) -> None:
        super().__init__(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu" or x.dim() != 4:
            return super().forward(x)
        if torch.is_grad_enabled() and x.requires_grad:
            return _MaxPool2x2.apply(x)
        q00, q01, q10, q11 = _quarters(x)
        return torch.maximum(torch.maximum(q00, q01), torch.maximum(q10, q11))


def _norm(channels: int, dp: bool) -> nn.Module:
    return nn.GroupNorm(min(8, channels), channels) if dp else nn.BatchNorm2d(channels)


class SmallCNN(nn.Module):
    """Two conv blocks and an MLP head; ~0.1-0.4M parameters depending on ``width``."""

    def __init__(
        self, *, in_channels: int, num_classes: int, image_size: int, width: int, dp: bool
    ) -> None:
        super().__init__()
        # A block's ReLU overwrites its norm's output (which no backward reads): one pass
        # over the block's largest tensor, not two and a new one. Under DP, Opacus's backward
        # hooks forbid changing a hooked module's output in place. The head's ReLU keeps its
        # input: the received-model checks read that Linear's output through a hook.
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1),
            _norm(width, dp),
            nn.ReLU(inplace=not dp),
            MaxPool2x2(),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            _norm(2 * width, dp),
            nn.ReLU(inplace=not dp),
            MaxPool2x2(),
        )
        side = image_size // 4
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(2 * width * side * side, 128),
            nn.ReLU(),
            nn.Linear(128, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


@MODELS.register("small_cnn", modality="image")
def small_cnn(
    *, num_classes: int, dp: bool, input_shape: tuple[int, ...], width: int = 32
) -> nn.Module:
    channels, size, _ = input_shape
    return SmallCNN(
        in_channels=channels, num_classes=num_classes, image_size=size, width=width, dp=dp
    )


@MODELS.register("resnet18", modality="image")
def resnet18_small(
    *, num_classes: int, dp: bool, input_shape: tuple[int, ...], norm: str = "batch"
) -> nn.Module:
    """torchvision's ResNet-18 with a 3x3 stem and no max-pool, for 28-32 px inputs.

    ``norm: group`` gives GroupNorm without DP too: the same network trains with or without
    DP-SGD, so a sweep over epsilon compares one architecture.
    """
    if norm not in ("batch", "group"):
        raise UserError(f"model.options.norm: 'batch' or 'group', not {norm!r}")
    # Here, not at the top: torchvision.models imports torch._dynamo (about 1.3 CPU-s), which
    # a process that builds a small_cnn and never trains (a run's driver) does not need.
    from torchvision.models import resnet18

    channels = input_shape[0]
    group = dp or norm == "group"
    norm_layer = (lambda c: nn.GroupNorm(min(32, c), c)) if group else nn.BatchNorm2d
    model = resnet18(weights=None, num_classes=num_classes, norm_layer=norm_layer)
    model.conv1 = nn.Conv2d(channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    return model
