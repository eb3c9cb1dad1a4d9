"""What the audit needs to know about the target model's task.

The audit library never imports the harness: callers hand it an object that satisfies
:class:`AuditTask` (a model factory, a trainer and per-record losses). ``ml.tasks``
provides the implementations used by the federated runs.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import torch


@runtime_checkable
class AuditTask(Protocol):
    """Model factory, training and per-record features of one learning task.

    Records are numpy arrays: ``x`` of shape ``(n, ...)`` and ``y`` of shape ``(n,)`` (integer
    class labels; for language models ``y`` may be ``None``).
    """

    modality: str
    """``"image"``, ``"tabular"`` or ``"text"``: selects generator and classifier designs."""

    num_classes: int

    def make_model(self) -> torch.nn.Module:
        """Return a fresh, untrained model of the target's architecture."""
        ...

    def train_model(
        self,
        model: torch.nn.Module,
        x: np.ndarray,
        y: np.ndarray | None,
        *,
        epochs: int,
        seed: int,
        device: torch.device,
    ) -> None:
        """Train ``model`` in place on ``(x, y)`` (used for the helper model h)."""
        ...

    def per_record_loss(
        self,
        model: torch.nn.Module,
        x: np.ndarray,
        y: np.ndarray | None,
        *,
        device: torch.device,
    ) -> np.ndarray:
        """Loss of ``model`` on each record, shape ``(n,)``."""
        ...

    def loss_features(
        self,
        model: torch.nn.Module,
        x: np.ndarray,
        y: np.ndarray | None,
        *,
        device: torch.device,
    ) -> np.ndarray:
        """Model-dependent features of each record, shape ``(n, k)``.

        The first column is the per-record loss; further columns are modality specific
        (e.g. the logits for classifiers, the per-token loss sequence for language models).
        The baseline receives these features from the helper h, the MIA from the target f.
        """
        ...
