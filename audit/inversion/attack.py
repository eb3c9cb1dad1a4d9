"""Gradient inversion: can the server rebuild a site's records from the update it sent?

An honest-but-curious server holds, for each round, the global weights it sent, the site's
update (its returned weights minus those), the site's record count (``num-examples``) and
what the run's config says of local training (batch size, local epochs or steps, optimizer
kind and learning rate). This module runs the attacks such a server would, from those
alone (torch only, no Flower):

* **FedSGD** (one local step of one batch, ``fl.local_steps: 1``): dummy records are
  optimised until the update their simulated step gives matches the site's, by cosine
  distance plus a total-variation image prior (Geiping et al. 2020, "Inverting gradients");
  the labels are read off the last layer's bias update first (iDLG, Zhao et al. 2020: a
  class present in the batch has a negative bias gradient; counts in proportion).
* **FedAvg** (several local steps or epochs): the same, with the site's whole local training
  simulated on the dummy records (differentiably, :func:`torch.func.functional_call`) and
  the resulting weight change matched (Dimitrov et al. 2022). Simplified: the server does
  not know the site's shuffling, so every simulated epoch reuses the *same* dummy records in
  the same fixed batches (their order-invariant prior, taken as a hard constraint).
* **Tabular rows**: each categorical field is relaxed to a softmax over its levels, each
  numeric field is free; several restarts are pooled field by field (majority level, median
  value) and each field's agreement over the restarts is its confidence (TabLeak's
  entropy-based selection, Vero et al. 2023).
* Text: not supported (:class:`InversionUnsupported`).

Only the site holds its true records: it compares the reconstruction with them
(:mod:`audit.inversion.scores`) and sends summary numbers. Each score reads against a
**baseline**: the same attack on an update of the same shape computed from public records
(records the model never saw), compared with the same true records; what the baseline
reaches is what chance gives.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy
import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F

from panoramia_fl.audit.inversion.inversion_config import MODALITIES, AttackKind, InversionConfig
from panoramia_fl.contracts.errors import UserError

__all__ = [
    "InversionUnsupported",
    "LocalTraining",
    "Reconstruction",
    "RecordSpec",
    "invert",
    "label_counts",
    "simulate_update",
]


class InversionUnsupported(UserError, ValueError):
    """The inversion audit cannot attack this kind of record or model."""


@dataclass(frozen=True)
class LocalTraining:
    """What the server knows of a site's local training in one round."""

    num_examples: int
    batch_size: int
    epochs: int
    steps: int | None
    """``fl.local_steps``: that many batches, one step each (FedSGD at 1); None: epochs."""
    optimizer: str
    learning_rate: float
    momentum: float = 0.9
    weight_decay: float = 0.0

    @property
    def attack(self) -> AttackKind:
        return "fedsgd" if self.steps == 1 else "fedavg"

    @property
    def records(self) -> int:
        """Records the round's steps used (all of them over epochs; the first batches'
        with ``steps``)."""
        b = max(1, min(self.batch_size, self.num_examples))
        return self.num_examples if self.steps is None else min(self.num_examples, self.steps * b)

    def batches(
        self, limit: int | None = None, max_steps: int | None = None
    ) -> tuple[int, list[tuple[torch.Tensor, int]]]:
        """(records simulated, the simulated steps in order: each step's record indices
        and how many of the site's steps it stands for).

        The attack's cost budget: with ``limit`` below :attr:`records`, ``limit`` records
        stand in for all, the same number of steps each with its batch shrunk in proportion;
        with ``max_steps`` below the number of steps, consecutive steps are merged into one
        (their batches joined, the step size multiplied by their number)."""
        n = self.records
        b = max(1, min(self.batch_size, self.num_examples))
        steps = self.steps if self.steps is not None else self.epochs * math.ceil(n / b)
        if limit is not None and n > limit:
            b, n = max(1, round(b * limit / n)), limit
        order = torch.arange(n).repeat(math.ceil(steps * b / n) + 1)
        per_step = [order[i * b : i * b + b] for i in range(steps)]
        if self.steps is None:  # each epoch restarts at the first record
            per_epoch = math.ceil(n / b)
            per_step = [torch.arange(n)[(i % per_epoch) * b :][:b] for i in range(steps)]
        merge = 1 if max_steps is None else math.ceil(steps / max_steps)
        merged = [
            (torch.cat(per_step[i : i + merge]), len(per_step[i : i + merge]))
            for i in range(0, steps, merge)
        ]
        return n, merged


def _trainable(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: p.detach() for k, p in model.named_parameters() if p.requires_grad}


def simulate_update(
    model: nn.Module,
    global_state: dict[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    training: LocalTraining,
    *,
    differentiable: bool,
    limit: int | None = None,
    max_steps: int | None = None,
) -> dict[str, torch.Tensor]:
    """The change of the trainable weights after ``training`` on ``(x, y)`` from
    ``global_state`` (batches in order, the optimizer written out functionally).

    With ``differentiable`` the change is a function of ``x`` (the attacker's simulation);
    an Adam step's ``eps`` is then raised to a tenth of the gradient's RMS, so that the
    simulated step stays a smooth function of the records (a first Adam step is otherwise a
    sign, whose derivative is zero). ``limit``, ``max_steps``: see :meth:`LocalTraining.batches`.
    """
    model.train()
    names = [k for k, p in model.named_parameters() if p.requires_grad]
    start = {k: global_state[k].detach().to(torch.float32) for k in names}
    params = {k: v.clone().requires_grad_(True) for k, v in start.items()}
    buffers = {k: global_state[k].clone() for k, _ in model.named_buffers()}
    state: dict[str, dict[str, torch.Tensor]] = {}
    _, batches = training.batches(limit, max_steps)
    t = 0
    for batch, merged in batches:
        t += merged
        batch = batch.to(x.device)
        logits = functional_call(model, {**params, **buffers}, (x[batch],))
        loss = F.cross_entropy(logits, y[batch])
        grads = torch.autograd.grad(
            loss, list(params.values()), create_graph=differentiable, allow_unused=True
        )
        with torch.set_grad_enabled(differentiable):
            stepped = {
                k: _step(k, p, g, state, t, training, scale=merged, smooth=differentiable)
                for (k, p), g in zip(params.items(), grads, strict=True)
            }
        params = (
            stepped
            if differentiable
            else {k: p.detach().requires_grad_(True) for k, p in stepped.items()}
        )
    delta = {k: params[k] - start[k] for k in names}
    return delta if differentiable else {k: d.detach() for k, d in delta.items()}


def _step(
    key: str,
    p: torch.Tensor,
    g: torch.Tensor | None,
    state: dict[str, dict[str, torch.Tensor]],
    t: int,
    training: LocalTraining,
    *,
    scale: int,
    smooth: bool,
) -> torch.Tensor:
    """One optimizer step of one tensor, as torch's SGD (momentum), Adam and AdamW take it
    (``t``: the site's step count; ``scale``: the site's steps this one stands for);
    ``state`` holds the moments (updated in place)."""
    lr, wd = training.learning_rate * scale, training.weight_decay
    g = torch.zeros_like(p) if g is None else g
    moments = state.setdefault(key, {})
    if training.optimizer == "sgd":
        g = g + wd * p
        buf = training.momentum * moments["m"] + g if "m" in moments else g
        moments["m"] = buf
        return p - lr * buf
    if training.optimizer == "adamw":
        p = p * (1 - lr * wd)
    elif wd:
        g = g + wd * p
    m = 0.9 * moments.get("m", torch.zeros_like(p)) + 0.1 * g
    v = 0.999 * moments.get("v", torch.zeros_like(p)) + 0.001 * g * g
    moments["m"], moments["v"] = m, v
    m_hat, v_hat = m / (1 - 0.9**t), v / (1 - 0.999**t)
    if smooth:
        # sqrt(v + eps^2): no infinite derivative where v is 0. A constant of the step, kept
        # on the device (no sync) and in float64 as the Python float it once was.
        eps = 0.1 * g.detach().pow(2).mean().sqrt().double() + 1e-8
        return p - lr * m_hat / (v_hat + eps * eps).sqrt()
    return p - lr * m_hat / (v_hat.sqrt() + 1e-8)


def label_counts(bias_update: torch.Tensor, n: int, *, plain_sgd_lr: float | None) -> np.ndarray:
    """How many of the ``n`` records carry each label, from the last layer's bias update.

    The cross-entropy gradient of a class's bias is ``mean(p_c) - n_c / n``: negative for
    every class in the batch (iDLG). With one plain SGD step (``plain_sgd_lr``) the gradient
    is ``-update / lr`` and, with ``p_c`` taken as uniform, ``n_c = n (1/K - g_c)``;
    otherwise only its direction is known and the counts are taken in proportion, the class
    with the largest positive update getting none.
    """
    d = -bias_update.detach().double().numpy()
    k = d.size
    if plain_sgd_lr is not None:
        g = d / plain_sgd_lr
    else:
        top = d.max()
        g = d * ((1.0 / k) / top) if top > 0 else d
    share = np.clip(1.0 / k - g, 0.0, None)
    share = share / share.sum() if share.sum() > 0 else np.full(k, 1.0 / k)
    counts = np.floor(share * n).astype(int)
    for c in np.argsort(-(share * n - counts))[: n - counts.sum()]:
        counts[c] += 1
    return counts


def _bias_key(update: dict[str, torch.Tensor], num_classes: int) -> str:
    keys = [k for k, v in update.items() if v.ndim == 1 and v.numel() == num_classes]
    if not keys:
        raise InversionUnsupported(
            "the model's last layer has no bias of one entry per class (the labels are read "
            "from it)"
        )
    return keys[-1]


def _tv(x: torch.Tensor) -> torch.Tensor:
    return (x[..., 1:, :] - x[..., :-1, :]).abs().mean() + (x[..., 1:] - x[..., :-1]).abs().mean()


def _cosine_distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> torch.Tensor:
    dot = torch.stack([(a[k] * b[k]).sum() for k in b]).sum()
    na = torch.stack([a[k].pow(2).sum() for k in b]).sum().sqrt()
    nb = torch.stack([b[k].pow(2).sum() for k in b]).sum().sqrt()
    return 1 - dot / (na * nb + 1e-12)


@dataclass(frozen=True)
class Reconstruction:
    """The attack's best reconstruction: records as the model reads them."""

    x: torch.Tensor
    y: torch.Tensor
    loss: float
    """Final cosine distance of the best restart (0: its update matches exactly)."""
    iterations: int
    """Optimisation steps taken over all restarts."""
    budget: int
    """The steps it was given (restarts x iterations): fewer taken means the time guard
    (``time_limit_s``) stopped it."""
    seconds: float
    confidence: torch.Tensor | None = None
    """Tabular: per row and field, the share of restarts that agree with the pooled value."""

    @property
    def cut_short(self) -> bool:
        """The time guard stopped the attack before its step budget."""
        return self.iterations < self.budget


@dataclass(frozen=True)
class Fields:
    """The encoded columns of one tabular field (a one-hot group or one numeric column)."""

    start: int
    width: int
    categorical: bool


@dataclass(frozen=True)
class RecordSpec:
    """What the server knows of a site's records: their kind, shape and labels' range."""

    modality: str
    shape: tuple[int, ...]
    """One record's shape as the model reads it."""
    num_classes: int
    fields: tuple[Fields, ...] | None = None
    """Tabular: the encoded columns of each field (the dataset's schema)."""


def invert(
    model: nn.Module,
    global_state: dict[str, torch.Tensor],
    update: dict[str, torch.Tensor],
    training: LocalTraining,
    *,
    spec: RecordSpec,
    config: InversionConfig,
    seed: int,
    device: torch.device | None = None,
) -> Reconstruction:
    """Rebuild the records of ``update`` from what the server has (see the module text).

    Every tensor of the attack lives on ``device`` (default: the CPU); the dummy records
    start from noise drawn on the host, so every device starts from the same records. The
    reconstruction comes back on the host."""
    modality, num_classes = spec.modality, spec.num_classes
    if modality not in MODALITIES:
        raise InversionUnsupported(
            f"audit.inversion: {modality} records are not supported ({', '.join(MODALITIES)})"
        )
    began = time.perf_counter()
    device = device or torch.device("cpu")
    model = model.to(device)
    state = {k: v.to(device) for k, v in global_state.items()}
    names = list(_trainable(model))
    target = {k: update[k].detach().to(device=device, dtype=torch.float32) for k in names}
    n, _ = training.batches(config.max_dummies, config.max_steps)
    y = _dummy_labels(target, training, n, num_classes).to(device)

    def loss_of(x: torch.Tensor) -> torch.Tensor:
        delta = simulate_update(
            model, state, x, y, training, differentiable=True, limit=n, max_steps=config.max_steps
        )
        return _cosine_distance(delta, target)

    results, steps = _restarts(
        loss_of,
        n,
        spec=spec,
        config=config,
        gen=torch.Generator().manual_seed(seed),
        device=device,
        deadline=began + config.time_limit_s,
    )
    best, x, confidence = _best_records(results, spec)
    return Reconstruction(
        x=x.detach(),
        y=y.cpu(),
        loss=float(best),
        iterations=steps,
        budget=config.restarts * config.iterations,
        seconds=time.perf_counter() - began,
        confidence=confidence,
    )


def _restarts(
    loss_of: Callable[[torch.Tensor], torch.Tensor],
    n: int,
    *,
    spec: RecordSpec,
    config: InversionConfig,
    gen: torch.Generator,
    device: torch.device,
    deadline: float,
) -> tuple[list[tuple[float, torch.Tensor]], int]:
    """Every restart from fresh noise (``gen``, on the host, one restart's records after
    another), optimised side by side until the time guard's ``deadline`` (one step at least):
    each restart's match loss and records on the host, and the steps taken over all."""
    latents = [
        torch.randn((n, *spec.shape), generator=gen).to(device).requires_grad_(True)
        for _ in range(config.restarts)
    ]
    losses, taken = _optimise(latents, loss_of, spec, config, deadline)
    records = [_decode(r.detach(), spec.modality, spec.fields).cpu() for r in latents]
    return list(zip(losses, records, strict=True)), taken * config.restarts


def _best_records(
    results: list[tuple[float, torch.Tensor]], spec: RecordSpec
) -> tuple[float, torch.Tensor, torch.Tensor | None]:
    """The reconstruction the restarts agree on: rows pooled field by field (with each
    field's agreement), or the records of the restart with the lowest match loss."""
    if spec.modality == "tabular":
        assert spec.fields is not None
        x, confidence = _pool_rows([r[1] for r in results], spec.fields)
        return min(r[0] for r in results), x, confidence
    best, x = min(results, key=lambda r: r[0])
    return best, x, None


def _dummy_labels(
    target: dict[str, torch.Tensor], training: LocalTraining, n: int, num_classes: int
) -> torch.Tensor:
    """The ``n`` dummy records' labels, read off the last layer's bias update."""
    sgd_step = training.optimizer == "sgd" and training.steps == 1
    counts = label_counts(
        target[_bias_key(target, num_classes)].cpu(),
        n,
        plain_sgd_lr=training.learning_rate if sgd_step else None,
    )
    return torch.as_tensor(np.repeat(np.arange(num_classes), counts), dtype=torch.long)


def _optimise(
    latents: list[torch.Tensor],
    loss_of: Callable[[torch.Tensor], torch.Tensor],
    spec: RecordSpec,
    config: InversionConfig,
    deadline: float,
) -> tuple[list[float], int]:
    """The restarts side by side: one Adam over all their records (``latents``, one tensor
    a restart) for ``config.iterations`` steps, or until the time guard's ``deadline``;
    (each restart's last match loss, steps taken by each).

    Each restart's loss is backpropagated as soon as it is computed, which frees its
    simulated round before the next restart's is built (one backward pass of the summed
    losses held every restart's at once: more memory, no faster on the CPU). A restart's
    records get their own loss's gradient only, and Adam steps each tensor on its own, so
    each restart moves exactly as it would alone."""
    opt = torch.optim.Adam(latents, lr=config.learning_rate)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, config.iterations)
    match = torch.full((len(latents),), math.inf)
    taken = 0
    for _ in range(config.iterations):
        opt.zero_grad()
        matches = []
        for latent in latents:
            x = _decode(latent, spec.modality, spec.fields)
            loss = loss_of(x)
            matches.append(loss.detach())
            if spec.modality == "image" and config.tv_weight > 0:
                loss = loss + config.tv_weight * _tv(x)
            loss.backward()
        # Read once the restarts end: a float() here would wait for the device every step.
        match = torch.stack(matches)
        opt.step()
        sched.step()
        taken += 1
        if spec.modality == "image":
            with torch.no_grad():
                for latent in latents:
                    latent.clamp_(-1, 1)
        if time.perf_counter() > deadline:
            break
    return match.tolist(), taken


def _decode(latent: torch.Tensor, modality: str, fields: Sequence[Fields] | None) -> torch.Tensor:
    """Images: the latent itself (kept in [-1, 1]); rows: a softmax over each categorical
    field's levels, numeric columns as they are (the one-hot relaxation)."""
    if modality == "image":
        return latent
    assert fields is not None
    parts = [
        latent[:, f.start : f.start + f.width].softmax(dim=1)
        if f.categorical
        else latent[:, f.start : f.start + f.width]
        for f in fields
    ]
    return torch.cat(parts, dim=1)


def _pool_rows(
    restarts: list[torch.Tensor], fields: Sequence[Fields]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pool the restarts' rows field by field after matching them to the first restart's
    rows: a categorical field takes its most frequent level, a numeric one the median; the
    confidence of a field is the share of restarts agreeing with it (numeric: within a
    quarter of a standard unit)."""
    ref = restarts[0]
    aligned = [ref]
    for other in restarts[1:]:
        cost = torch.cdist(ref, other).numpy()
        _, cols = scipy.optimize.linear_sum_assignment(cost)
        aligned.append(other[torch.as_tensor(cols)])
    stack = torch.stack(aligned)  # (R, n, d)
    out = torch.zeros_like(ref)
    conf = torch.zeros(ref.shape[0], len(fields))
    for j, f in enumerate(fields):
        block = stack[:, :, f.start : f.start + f.width]
        if f.categorical:
            levels = block.argmax(dim=2)  # (R, n)
            mode = levels.mode(dim=0).values
            out[:, f.start : f.start + f.width] = F.one_hot(mode, f.width).to(out.dtype)
            conf[:, j] = (levels == mode).float().mean(dim=0)
        else:
            med = block[..., 0].median(dim=0).values
            out[:, f.start] = med
            conf[:, j] = ((block[..., 0] - med).abs() <= 0.25).float().mean(dim=0)
    return out, conf
