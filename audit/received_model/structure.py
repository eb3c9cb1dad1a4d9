"""Structure: the model's first ReLU layer on the site's own records.

Crafted first layers look unlike trained ones on real records. Binning (imprint) repeats one
measurement in every row, so the rows are collinear; trap weights make each unit fire for
very few records, so a gradient row holds one record; a zero-update model (the other sites of
an inconsistency attack) kills every unit on every record. The layer checked is the first
``nn.Linear`` followed by an ``nn.ReLU`` (the tabular MLP's input layer, the image CNN's first
layer after the convolutions); a model without one (the text models) is not checked here.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from panoramia_fl.audit.received_model.thresholds import THRESHOLDS
from panoramia_fl.contracts.model_flags import CheckName, CheckOutcome

COLLINEAR_COSINE = 0.99
"""Two weight rows with ``|cos| >= 0.99`` are one measurement repeated."""


def first_relu_layer(model: nn.Module) -> nn.Linear | None:
    """The first ``nn.Linear`` that the next module (in registration order) feeds to a ReLU."""
    modules = list(model.modules())
    for layer, after in zip(modules, modules[1:], strict=False):
        if isinstance(layer, nn.Linear) and isinstance(after, nn.ReLU):
            return layer
    return None


@torch.no_grad()
def pre_activations(model: nn.Module, layer: nn.Linear, inputs: torch.Tensor) -> torch.Tensor:
    """``layer``'s output (before its ReLU) on ``inputs``, ``(records, units)``."""
    seen: list[torch.Tensor] = []
    hook = layer.register_forward_hook(lambda _m, _i, out: seen.append(out.detach()))
    try:
        model.eval()
        for start in range(0, len(inputs), 256):
            model(inputs[start : start + 256])
    finally:
        hook.remove()
    return torch.cat(seen).reshape(len(inputs), -1)


def repeated_rows(weight: torch.Tensor) -> float:
    """The share of rows with ``|cos| >= COLLINEAR_COSINE`` to another row (zero rows never)."""
    rows = weight.detach().double()
    norms = rows.norm(dim=1)
    live = norms > 0
    unit = rows[live] / norms[live, None]
    if len(unit) < 2:
        return 0.0
    cos = (unit @ unit.T).abs()
    cos.fill_diagonal_(0.0)
    return float((cos.max(dim=1).values >= COLLINEAR_COSINE).sum()) / len(rows)


def structure(model: nn.Module, inputs: torch.Tensor, *, batch_size: int) -> list[CheckOutcome]:
    """The three structure checks of ``model`` on the site's records ``inputs`` (model-ready);
    empty when the model has no first ReLU layer.

    ``lone_units``: the share of units active (pre-activation > 0) for at least one record
    but at most one record per batch of ``batch_size`` (``max(1, n / batch_size)`` of the
    ``n`` records); ``dead_units``: the share active for none; ``repeated_rows``:
    :func:`repeated_rows` of the layer's weight.
    """
    layer = first_relu_layer(model)
    if layer is None or len(inputs) == 0:
        return []
    active = (pre_activations(model, layer, inputs) > 0).sum(dim=0)
    n, units = len(inputs), int(active.numel())
    few = max(1, math.floor(n / batch_size))
    lone = float(((active >= 1) & (active <= few)).sum()) / units
    dead = float((active == 0).sum()) / units
    where = f"{units} units of the first ReLU layer on {n} of the site's records"
    return [
        _outcome("lone_units", lone, f"{where}; at most {few} active record(s) counts as lone"),
        _outcome("repeated_rows", repeated_rows(layer.weight), where),
        _outcome("dead_units", dead, where),
    ]


def _outcome(check: CheckName, statistic: float, detail: str) -> CheckOutcome:
    threshold, honest = THRESHOLDS[check]
    return CheckOutcome(
        check=check, statistic=statistic, threshold=threshold, honest_range=honest, detail=detail
    )
