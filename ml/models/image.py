"""Image classifiers: a small CNN for 28x28 inputs and a ResNet-18 adapted to small images.

With ``dp=True`` every BatchNorm becomes GroupNorm: Opacus needs per-sample gradients, which
BatchNorm's batch statistics do not have.
"""

from __future__ import annotations

import torch
from torch import nn
from torchvision.models import resnet18

from contracts.errors import UserError
from ml.models import MODELS


def _norm(channels: int, dp: bool) -> nn.Module:
    return nn.GroupNorm(min(8, channels), channels) if dp else nn.BatchNorm2d(channels)


class SmallCNN(nn.Module):
    """Two conv blocks and an MLP head; ~0.1-0.4M parameters depending on ``width``."""

    def __init__(
        self, *, in_channels: int, num_classes: int, image_size: int, width: int, dp: bool
    ) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1),
            _norm(width, dp),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            _norm(2 * width, dp),
            nn.ReLU(),
            nn.MaxPool2d(2),
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
    channels = input_shape[0]
    group = dp or norm == "group"
    norm_layer = (lambda c: nn.GroupNorm(min(32, c), c)) if group else nn.BatchNorm2d
    model = resnet18(weights=None, num_classes=num_classes, norm_layer=norm_layer)
    model.conv1 = nn.Conv2d(channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    return model
