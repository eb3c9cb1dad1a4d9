"""A site's own model and data loader, registered with panoramia-fl as a plugin.

Run it with ``plugins: [clinic_plugin]`` in the config, or ``--plugin clinic_plugin``, with
this folder (``examples/plugin``) on ``PYTHONPATH`` or the package installed. Importing the
module registers ``clinic_cnn`` (``model.name``) and ``clinic_scans`` (``data.name``); the
harness imports it in the driver, in every Ray worker and in every ClientApp process.

The "scans" are scikit-learn's 8x8 digits, standing in for a hospital's images.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from pydantic import Field
from torch import nn

from panoramia_fl.ml.datasets import DATASETS, Dataset, LoaderOptions
from panoramia_fl.ml.models import MODELS


class ClinicNet(nn.Module):
    """Two convolutions with a skip connection (DenseNet-style concatenation) and a linear
    head. ``norm`` picks the normalisation: Opacus cannot train BatchNorm under DP-SGD."""

    def __init__(self, *, channels: int, num_classes: int, side: int, width: int, norm: str):
        super().__init__()

        def norm_layer(c: int) -> nn.Module:
            return nn.BatchNorm2d(c) if norm == "batch" else nn.GroupNorm(min(4, c), c)

        self.stem = nn.Sequential(nn.Conv2d(channels, width, 3, padding=1), nn.ReLU())
        self.block = nn.Sequential(
            nn.Conv2d(width, width, 3, padding=1), norm_layer(width), nn.ReLU()
        )
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(side // 2),
            nn.Flatten(),
            nn.Linear(2 * width * (side // 2) ** 2, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.stem(x)
        return self.head(torch.cat([features, self.block(features)], dim=1))


@MODELS.register("clinic_cnn", modality="image")
def clinic_cnn(
    *,
    num_classes: int,
    dp: bool,
    input_shape: tuple[int, ...],
    width: int = 8,
    norm: str = "auto",
) -> nn.Module:
    """The builder's contract: keyword arguments ``num_classes``, ``dp`` (true under any DP
    level: build DP-safe layers), ``input_shape`` (one record's shape, from the dataset),
    then ``model.options`` with defaults. ``norm: auto`` is GroupNorm under DP, else
    BatchNorm; ``norm: batch`` keeps BatchNorm even under DP (which the harness refuses)."""
    channels, side, _ = input_shape
    if norm == "auto":
        norm = "group" if dp else "batch"
    return ClinicNet(channels=channels, num_classes=num_classes, side=side, width=width, norm=norm)


class ScanOptions(LoaderOptions):
    """``data.options``: unknown keys are errors naming ``data.options.<key>``."""

    public_fraction: float = Field(0.2, gt=0, lt=1, description="records no site trains on")


@DATASETS.register("clinic_scans", options=ScanOptions)
def clinic_scans(root: Path | None, options: ScanOptions) -> Dataset:
    """The loader's contract: ``(root, options) -> Dataset``. ``x`` / ``y`` are the pool the
    sites are drawn from; ``public_x`` / ``public_y`` records no site trains on (central
    evaluation, the calibrated MIA's reference models, reference pools). Images are uint8
    ``(n, C, H, W)``; labels int64 in ``0..num_classes-1``."""
    from sklearn.datasets import load_digits

    del root  # a real loader reads its files from data.root
    bunch = load_digits()
    x = np.clip(bunch.images * 16.0, 0, 255).astype(np.uint8)[:, None]
    y = bunch.target.astype(np.int64)
    order = np.random.default_rng(7).permutation(len(x))
    n_public = int(round(options.public_fraction * len(x)))
    public, pool = order[:n_public], order[n_public:]
    return Dataset(
        name="clinic_scans",
        modality="image",
        x=x[pool],
        y=y[pool],
        num_classes=10,
        input_shape=(1, 8, 8),
        public_x=x[public],
        public_y=y[public],
    )
