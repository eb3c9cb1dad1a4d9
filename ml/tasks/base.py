"""Generic torch task: batching, training, evaluation and per-record losses.

Subclasses say how records become tensors and what the per-record loss is; everything else
(training loop, evaluation, loss features) is shared so the target, the helper model and
every site train the same way.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from panoramia_fl.contracts.errors import UserError
from panoramia_fl.contracts.registry import Registry
from panoramia_fl.ml import optimizers
from panoramia_fl.ml.models import MODELS, build_model
from panoramia_fl.ml.training import run_epoch


class GatheredRecords(torch.utils.data.TensorDataset):
    """Records as tensors whose batches are gathered by one index on the tensors' device
    (``__getitems__``, which torch's loader and Opacus's Poisson loader call with a batch's
    indices) instead of one record at a time and stacked."""

    def __getitems__(self, indices: list[int]) -> list[torch.Tensor]:
        index = torch.as_tensor(indices, dtype=torch.long, device=self.tensors[0].device)
        # index_select, not t[index]: its batch has the strides torch.stack gives, so the
        # convolutions take the same kernels (and CPU results stay bit for bit).
        return [t.index_select(0, index) for t in self.tensors]


INFERENCE_BATCH = {"cpu": 128}
"""Records per inference batch on a device type (512 on any other): on the CPU a batch's
activations should stay in cache (512 28x28 images through the small CNN's first block are
51 MB; 128 took 2.1-2.5x less time on a 2-core EPYC). A record's outputs do not depend on the
batch it is in: the same bits at 128 and 512 (``tests/test_exact_speedups.py``)."""


def inference_batch_size(device: torch.device) -> int:
    """Records per batch when ``device`` only computes outputs (no training step)."""
    return INFERENCE_BATCH.get(device.type, 512)


def _gathered(batch: list[torch.Tensor]) -> list[torch.Tensor]:
    """The loader's collate step: a gathered batch is already one tensor per field."""
    return batch


@dataclass(frozen=True)
class OptimizerSpec:
    """Local optimizer settings (``fl.optimizer``, ``fl.learning_rate`` ...)."""

    name: str = "adam"
    learning_rate: float = 1e-3
    momentum: float = 0.9
    weight_decay: float = 0.0

    def build(self, params: Iterator[nn.Parameter]) -> torch.optim.Optimizer:
        if self.name == "sgd":
            return optimizers.SGD(
                params,
                lr=self.learning_rate,
                momentum=self.momentum,
                weight_decay=self.weight_decay,
            )
        if self.name == "adam":
            return optimizers.Adam(params, lr=self.learning_rate, weight_decay=self.weight_decay)
        if self.name == "adamw":
            return optimizers.AdamW(params, lr=self.learning_rate, weight_decay=self.weight_decay)
        raise ValueError(f"fl.optimizer: unknown optimizer {self.name!r} (sgd, adam, adamw)")


@dataclass
class TorchTask(ABC):
    """A supervised task on numpy records, trained with torch.

    Parameters
    ----------
    model_name, model_options
        Registered architecture (see :mod:`ml.models`) and its keyword options.
    num_classes, input_shape
        Output classes and the shape of one record.
    dp
        Build a DP-compatible variant of the model (e.g. GroupNorm instead of BatchNorm).
    batch_size, optimizer
        Used by :meth:`train_model` and by local training in the clients.
    """

    model_name: str
    num_classes: int
    input_shape: tuple[int, ...]
    dp: bool = False
    batch_size: int = 64
    optimizer: OptimizerSpec = field(default_factory=OptimizerSpec)
    model_options: dict[str, Any] = field(default_factory=dict)
    modality: str = "image"

    # -- to be specialised -------------------------------------------------------------
    @abstractmethod
    def tensors(self, x: np.ndarray, y: np.ndarray | None) -> tuple[torch.Tensor, ...]:
        """Records as model-ready tensors (inputs first, then targets if any)."""

    @abstractmethod
    def record_losses(self, model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Loss of each record of a batch, shape ``(B,)``."""

    def batch_features(self, model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Loss features of each record, ``(B, k)``; column 0 is the loss."""
        return self.record_losses(model, batch)[:, None]

    def record_losses_and_hits(
        self, model: nn.Module, batch: tuple[torch.Tensor, ...]
    ) -> torch.Tensor:
        """``(B, 2)``: each record's loss and 1.0 where the model predicts it right (NaN
        where accuracy has no meaning), from one forward pass."""
        losses = self.record_losses(model, batch)
        return torch.stack([losses, torch.full_like(losses, float("nan"))], dim=1)

    # -- shared ------------------------------------------------------------------------
    def make_model(self) -> nn.Module:
        modality = MODELS.meta(self.model_name).get("modality")
        if modality is not None and modality != self.modality:
            raise UserError(
                f"model.name: {self.model_name!r} is a model for {modality} records, "
                f"not {self.modality}"
            )
        return build_model(
            self.model_name,
            num_classes=self.num_classes,
            dp=self.dp,
            input_shape=self.input_shape,
            **self.model_options,
        )

    def batch_loss(self, model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return self.record_losses(model, batch).mean()

    def loader(
        self,
        x: np.ndarray,
        y: np.ndarray | None,
        *,
        shuffle: bool,
        seed: int = 0,
        batch_size: int | None = None,
        device: torch.device | None = None,
    ) -> torch.utils.data.DataLoader:
        """Batches of ``(x, y)``; with ``device`` the records are moved there once, here, and
        each batch is gathered there by one index (no batch is copied from the host, none
        stacked record by record). The order comes from a CPU generator either way: the same
        seed gives the same batches on every device, and those of torch's own loader."""
        tensors = self.tensors(x, y)
        if device is not None:
            tensors = tuple(t.to(device) for t in tensors)
        generator = torch.Generator().manual_seed(seed)
        return torch.utils.data.DataLoader(
            GatheredRecords(*tensors),
            batch_size=batch_size or self.batch_size,
            shuffle=shuffle,
            generator=generator,
            collate_fn=_gathered,
        )

    def train_model(
        self,
        model: nn.Module,
        x: np.ndarray,
        y: np.ndarray | None,
        *,
        epochs: int,
        seed: int,
        device: torch.device,
    ) -> None:
        torch.manual_seed(seed)
        model.to(device).train()
        optimizer = self.optimizer.build(model.parameters())
        loader = self.loader(x, y, shuffle=True, seed=seed, device=device)
        for _ in range(epochs):
            run_epoch(model, loader, optimizer, lambda b: self.batch_loss(model, b), device)

    @torch.no_grad()
    def _map_batches(
        self,
        fn: Callable[[tuple[torch.Tensor, ...]], torch.Tensor],
        model: nn.Module,
        x: np.ndarray,
        y: np.ndarray | None,
        device: torch.device,
    ) -> np.ndarray:
        model.to(device).eval()
        out = [
            fn(batch).float().cpu()
            for batch in self.loader(
                x, y, shuffle=False, batch_size=inference_batch_size(device), device=device
            )
        ]
        return torch.cat(out).numpy()

    def per_record_loss(
        self, model: nn.Module, x: np.ndarray, y: np.ndarray | None, *, device: torch.device
    ) -> np.ndarray:
        return self._map_batches(lambda b: self.record_losses(model, b), model, x, y, device)

    def loss_features(
        self, model: nn.Module, x: np.ndarray, y: np.ndarray | None, *, device: torch.device
    ) -> np.ndarray:
        return self._map_batches(lambda b: self.batch_features(model, b), model, x, y, device)

    @torch.no_grad()
    def evaluate(
        self, model: nn.Module, x: np.ndarray, y: np.ndarray | None, *, device: torch.device
    ) -> dict[str, float]:
        """Mean loss and accuracy over ``(x, y)``: one forward pass (the server's central
        evaluation runs it on the whole public split after every round)."""
        scores = self._map_batches(
            lambda b: self.record_losses_and_hits(model, b), model, x, y, device
        )
        losses = np.ascontiguousarray(scores[:, 0])  # summed in per_record_loss's order
        return {
            "loss": float(losses.mean()),
            "accuracy": float(scores[:, 1].sum()) / max(len(x), 1),
        }


TASKS: Registry[type[TorchTask]] = Registry(
    "modality",
    config_key="task.modality",
    builtins={m: f"panoramia_fl.ml.tasks.{m}" for m in ("image", "tabular", "text")},
)
"""The task class of each modality (``@TASKS.register(modality)``)."""


def build_task(modality: str, **kwargs: Any) -> TorchTask:
    """The task of ``modality`` (its registered class) built from ``kwargs``."""
    return TASKS.get(modality)(modality=modality, **kwargs)


class ClassificationTask(TorchTask):
    """Cross-entropy on labelled records; loss features are [loss, logits]."""

    def record_losses(self, model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        inputs, targets = batch
        return F.cross_entropy(model(inputs), targets, reduction="none")

    def batch_features(self, model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        inputs, targets = batch
        logits = model(inputs)
        loss = F.cross_entropy(logits, targets, reduction="none")
        return torch.cat([loss[:, None], logits], dim=1)

    def record_losses_and_hits(
        self, model: nn.Module, batch: tuple[torch.Tensor, ...]
    ) -> torch.Tensor:
        inputs, targets = batch
        logits = model(inputs)
        losses = F.cross_entropy(logits, targets, reduction="none")
        return torch.stack([losses, (logits.argmax(dim=1) == targets).to(losses.dtype)], dim=1)
