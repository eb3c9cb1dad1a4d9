"""Loading a saved global model back into its architecture.

>>> from panoramia_fl.ml.saved_models import load_global_model
>>> model, checkpoint = load_global_model("runs/default/global_model.pt")

The checkpoint's ``meta`` names the modality, the registered model and its options, so the
model is rebuilt without the run's config.
"""

from __future__ import annotations

from pathlib import Path

import torch

from panoramia_fl.contracts.checkpoint import Checkpoint, load_checkpoint
from panoramia_fl.contracts.errors import UserError
from panoramia_fl.contracts.run_files import CheckpointMeta
from panoramia_fl.ml.tasks import TorchTask, build_task


def task_from_meta(meta: CheckpointMeta) -> TorchTask:
    return build_task(
        meta.modality,
        model_name=meta.model,
        num_classes=meta.num_classes,
        input_shape=meta.input_shape,
        dp=meta.dp,
        model_options=dict(meta.model_options),
    )


def load_global_model(path: str | Path) -> tuple[torch.nn.Module, Checkpoint]:
    """Rebuild the model saved at ``path`` (``global_model.pt`` or a round checkpoint)."""
    checkpoint = load_checkpoint(Path(path))
    if checkpoint.meta is None:
        raise UserError(f"{path}: the checkpoint names no model (its meta is empty)")
    model = task_from_meta(checkpoint.meta).make_model()
    model.load_state_dict(checkpoint.state_dict)
    model.eval()
    return model, checkpoint
