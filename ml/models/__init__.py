"""Model registry: architectures selected by name in the config (``model.name``).

Modalities add theirs with ``@MODELS.register(name, modality=...)``; a task builds one
(:meth:`ml.tasks.TorchTask.make_model`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from contracts.registry import Registry

ModelBuilder = Callable[..., torch.nn.Module]
"""``builder(*, num_classes, dp, input_shape, **options)``."""

MODELS: Registry[ModelBuilder] = Registry(
    "model",
    config_key="model.name",
    builtins={
        "small_cnn": "ml.models.image",
        "resnet18": "ml.models.image",
        "mlp": "ml.models.tabular",
        "gpt2_small": "ml.models.text",
    },
)
