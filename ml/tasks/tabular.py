"""Tabular classification: float32 records ``(n, d)`` of encoded features, cross-entropy.

Records come from :mod:`ml.datasets.tabular` already encoded (numeric columns
standardised, categorical columns one-hot), so the task only converts them to tensors.
``schema`` optionally carries that encoding (``Dataset.info["schema"]``); the audit's
tabular generator reads it from the task to know which columns form one attribute, and
infers the same structure from the data when it is absent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from panoramia_fl.ml.tasks.base import TASKS, ClassificationTask


@TASKS.register("tabular")
@dataclass
class TabularClassificationTask(ClassificationTask):
    """Cross-entropy classifier on encoded tabular rows; loss features are [loss, logits]."""

    schema: dict[str, Any] | None = None
    """JSON schema of the encoding (see :func:`ml.datasets.tabular.encode_frame`)."""

    def tensors(self, x: np.ndarray, y: np.ndarray | None) -> tuple[torch.Tensor, ...]:
        if y is None:
            raise ValueError("tabular classification needs labels")
        inputs = torch.as_tensor(np.asarray(x, dtype=np.float32))
        if inputs.ndim != 2:
            raise ValueError(f"tabular records must be (n, d), got shape {tuple(inputs.shape)}")
        return inputs, torch.as_tensor(np.asarray(y), dtype=torch.long)
