"""Causal language modelling on fixed-length token chunks (``x`` int64 ``(n, T)``, ``y=None``).

The per-record loss is the mean next-token cross-entropy over the chunk's ``T - 1``
predicted tokens. The loss features (input of the baseline and the MIA, PANORAMIA App. C.2)
are that mean followed by the ``T - 1`` per-token losses: shape ``(n, T)``, column 0 the loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from panoramia_fl.ml.models import MODELS
from panoramia_fl.ml.tasks.base import TASKS, TorchTask

EVAL_BATCH = 128
"""Cap on inference batches: logits are ``(B, T, vocab)``, ~130 MB at B=128, T=64, V=4096."""


def token_losses(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy ``(B, T-1)`` of ``logits (B, T, V)`` against ``ids (B, T)``."""
    pred = logits[:, :-1].float()
    return F.cross_entropy(
        pred.reshape(-1, pred.shape[-1]), ids[:, 1:].reshape(-1), reduction="none"
    ).view(ids.shape[0], -1)


@TASKS.register("text")
@dataclass
class TextLMTask(TorchTask):
    """Next-token prediction with a causal LM that maps ids ``(B, T)`` to logits."""

    @property
    def pretrained_dir(self) -> str | None:
        """The saved model the target starts from (a model registered with
        ``pretrained_option``, e.g. hf_causal_lm's ``path``), or None: the audit's text
        generator then starts from it too."""
        option = MODELS.meta(self.model_name).get("pretrained_option")
        return None if option is None else self.model_options.get(option)

    def tensors(self, x: np.ndarray, y: np.ndarray | None) -> tuple[torch.Tensor, ...]:
        x = np.asarray(x)
        if x.ndim != 2 or not np.issubdtype(x.dtype, np.integer):
            raise ValueError(
                f"text records must be integer token ids (n, T), got {x.dtype} {x.shape}"
            )
        return (torch.as_tensor(x, dtype=torch.long),)

    def record_losses(self, model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        (ids,) = batch
        return token_losses(model(ids), ids).mean(dim=1)

    def batch_features(self, model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        (ids,) = batch
        per_token = token_losses(model(ids), ids)
        return torch.cat([per_token.mean(dim=1, keepdim=True), per_token], dim=1)

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
        if batch_size is not None:  # inference: bound the logits' memory
            batch_size = min(batch_size, EVAL_BATCH)
        return super().loader(
            x, y, shuffle=shuffle, seed=seed, batch_size=batch_size, device=device
        )

    @torch.no_grad()
    def evaluate(
        self, model: nn.Module, x: np.ndarray, y: np.ndarray | None, *, device: torch.device
    ) -> dict[str, float]:
        """Mean token loss, perplexity and next-token accuracy."""
        model.to(device).eval()
        total, correct, tokens = 0.0, 0, 0
        for (ids,) in self.loader(x, y, shuffle=False, batch_size=EVAL_BATCH, device=device):
            logits = model(ids)
            losses = token_losses(logits, ids)
            total += float(losses.sum())
            correct += int((logits[:, :-1].argmax(-1) == ids[:, 1:]).sum())
            tokens += losses.numel()
        loss = total / max(tokens, 1)
        return {
            "loss": loss,
            "perplexity": math.exp(min(loss, 50.0)),
            "accuracy": correct / max(tokens, 1),
        }
