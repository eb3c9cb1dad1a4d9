"""``stacked`` design of the text baseline / MIA: the paper's neural classifier, CPU-sized.

PANORAMIA (App. C.2) feeds a chunk to a GPT-2 sequence classifier and concatenates the
per-token loss sequence of h (baseline) or f (MIA) to its hidden state before a final
feed-forward layer, trained in two phases with weight decay. Here the token branch is a
small transformer encoder trained from scratch (a public pre-trained GPT-2 is not available
offline), the loss branch an MLP over the standardised loss sequence(s) and their sorted
values; the head is linear on both.

Phase 1 trains the loss branch and the head only (the token branch's output is zeroed), so
the classifier first learns what the losses say; phase 2 trains everything. The epoch with
the best ``select_by`` on validation (over the candidate epochs) is kept.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import torch
from sklearn.metrics import roc_auc_score
from torch import nn

from panoramia_fl.audit.panoramia.components import ClassifierData, SelectionScore


def loss_inputs(data: ClassifierData, *, use_reference: bool) -> np.ndarray:
    """Per-token losses (and reference losses and their difference), then sorted copies, the
    mean loss and the calibrated statistics when present."""
    f = np.asarray(data.features, dtype=np.float32)
    seqs = [f[:, 1:] if f.shape[1] > 1 else f]
    if use_reference and data.reference is not None:
        r = np.asarray(data.reference, dtype=np.float32)
        r = r[:, 1:] if r.shape[1] > 1 else r
        seqs += [r, seqs[0] - r]
    return data.with_calibration(np.hstack(seqs + [np.sort(s, axis=1) for s in seqs] + [f[:, :1]]))


class _Net(nn.Module):
    def __init__(
        self,
        *,
        vocab_size: int,
        length: int,
        loss_dim: int,
        width: int = 64,
        layers: int = 1,
        heads: int = 4,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, width)
        self.position = nn.Parameter(torch.zeros(1, length, width))
        layer = nn.TransformerEncoderLayer(
            width, heads, dim_feedforward=2 * width, dropout=dropout, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.loss_branch = nn.Sequential(
            nn.Linear(loss_dim, 64), nn.GELU(), nn.Dropout(dropout), nn.Linear(64, 32), nn.GELU()
        )
        self.head = nn.Linear(width + 32, 1)
        self.use_tokens = True

    def token_parameters(self) -> list[nn.Parameter]:
        return [
            *self.embed.parameters(),
            self.position,
            *self.encoder.parameters(),
            *self.norm.parameters(),
        ]

    def forward(self, ids: torch.Tensor, losses: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.encoder(self.embed(ids) + self.position[:, : ids.shape[1]]))
        pooled = h.mean(dim=1)
        if not self.use_tokens:
            pooled = torch.zeros_like(pooled)
        return self.head(torch.cat([pooled, self.loss_branch(losses)], dim=1))[:, 0]


class TextNeuralClassifier:
    """Transformer-on-tokens + loss-sequence MLP; see the module docstring."""

    def __init__(
        self,
        *,
        vocab_size: int,
        epochs: list[int],
        learning_rate: float,
        weight_decay: float,
        batch_size: int,
        use_reference: bool,
        device: torch.device,
        phase1_share: float = 0.25,
    ) -> None:
        if not epochs or min(epochs) < 1:
            raise ValueError("classifier.epochs must list positive epoch counts")
        self.vocab_size = vocab_size
        self.epochs = sorted(set(epochs))
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.use_reference = use_reference
        self.device = device
        self.phase1_share = phase1_share
        self.net: _Net | None = None
        self.mean: np.ndarray | None = None
        self.std: np.ndarray | None = None

    def _tensors(self, data: ClassifierData) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids and standardised loss features, on the device once per fit or score."""
        losses = (loss_inputs(data, use_reference=self.use_reference) - self.mean) / self.std
        return (
            torch.as_tensor(np.asarray(data.records.x), dtype=torch.long, device=self.device),
            torch.as_tensor(losses, dtype=torch.float32, device=self.device),
        )

    @torch.no_grad()
    def _scores(self, ids: torch.Tensor, losses: torch.Tensor) -> np.ndarray:
        assert self.net is not None
        self.net.eval()
        out = [self.net(ids[i : i + 512], losses[i : i + 512]) for i in range(0, len(ids), 512)]
        return torch.cat(out).double().cpu().numpy()

    def _optimizer(self, net: _Net) -> torch.optim.Optimizer:
        """AdamW over two groups: the token branch's parameters second, at rate 0 until
        phase 2 turns the tokens on."""
        token_params = {id(p) for p in net.token_parameters()}
        rest = [p for p in net.parameters() if id(p) not in token_params]
        groups: list[dict[str, Any]] = [
            {"params": rest},
            {"params": net.token_parameters(), "lr": 0.0},
        ]
        return torch.optim.AdamW(
            groups,
            lr=self.learning_rate,
            weight_decay=self.weight_decay,
        )

    def _epoch(
        self,
        net: _Net,
        optimizer: torch.optim.Optimizer,
        ids: torch.Tensor,
        losses: torch.Tensor,
        target: torch.Tensor,
        *,
        order: np.ndarray,
    ) -> None:
        """One pass over the training records in ``order``, in mini-batches."""
        loss_fn = nn.BCEWithLogitsLoss()
        net.train()
        for start in range(0, len(order), self.batch_size):
            b = torch.as_tensor(order[start : start + self.batch_size], device=self.device)
            logits = net(ids[b], losses[b])
            loss = loss_fn(logits, target[b])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

    def fit(
        self, train: ClassifierData, val: ClassifierData, *, select_by: SelectionScore, seed: int
    ) -> dict[str, object]:
        st = np.asarray(train.membership, dtype=np.float32)
        sv = np.asarray(val.membership).astype(np.int64)
        if len(np.unique(st)) < 2:
            raise ValueError("text classifier: the training data has a single class")
        raw = loss_inputs(train, use_reference=self.use_reference)
        self.mean, self.std = raw.mean(axis=0), raw.std(axis=0) + 1e-6
        ids, losses = self._tensors(train)
        vids, vlosses = self._tensors(val)
        torch.manual_seed(seed)
        net = _Net(vocab_size=self.vocab_size, length=ids.shape[1], loss_dim=losses.shape[1]).to(
            self.device
        )
        self.net = net
        total = self.epochs[-1]
        phase1 = max(1, int(math.floor(self.phase1_share * total))) if total > 1 else 0
        optimizer = self._optimizer(net)
        target = torch.as_tensor(st, device=self.device)
        rng = np.random.default_rng([seed, 0xC1A55])
        best: tuple[float, float, int, dict | None] = (-math.inf, -math.inf, 0, None)
        for epoch in range(1, total + 1):
            net.use_tokens = epoch > phase1
            optimizer.param_groups[1]["lr"] = self.learning_rate if net.use_tokens else 0.0
            self._epoch(net, optimizer, ids, losses, target, order=rng.permutation(len(ids)))
            if epoch in self.epochs:
                scores = self._scores(vids, vlosses)
                auc = float(roc_auc_score(sv, scores)) if len(np.unique(sv)) == 2 else 0.5
                key = (float(select_by(scores, sv)), auc)
                if key > best[:2]:
                    best = (key[0], key[1], epoch, copy.deepcopy(net.state_dict()))
        assert best[3] is not None
        net.load_state_dict(best[3])
        net.use_tokens = best[2] > phase1
        return {
            "design": "stacked",
            "epochs": best[2],
            "phase1_epochs": phase1,
            "val_bound": best[0],
            "val_auc": best[1],
            "inputs": int(losses.shape[1]),
        }

    def score(self, data: ClassifierData) -> np.ndarray:
        if self.net is None:
            raise RuntimeError("fit() the classifier before scoring")
        return self._scores(*self._tensors(data))
