"""Image classification: uint8 records ``(n, C, H, W)``, cross-entropy loss."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from panoramia_fl.ml.tasks.base import TASKS, ClassificationTask


def images_to_tensor(x: np.ndarray) -> torch.Tensor:
    """uint8 ``(n, C, H, W)`` in [0, 255] -> float in [-1, 1]."""
    return torch.as_tensor(x, dtype=torch.float32).div_(127.5).sub_(1.0)


@TASKS.register("image")
@dataclass
class ImageClassificationTask(ClassificationTask):
    """Cross-entropy classifier on images; loss features are [loss, logits]."""

    def tensors(self, x: np.ndarray, y: np.ndarray | None) -> tuple[torch.Tensor, ...]:
        if y is None:
            raise ValueError("image classification needs labels")
        return images_to_tensor(x), torch.as_tensor(y, dtype=torch.long)
