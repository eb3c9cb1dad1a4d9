"""Records back from what the server receives: a FedSGD gradient, or a FedAvg update (the
site's weights after its local epochs minus the crafted weights it was sent).

Each rebuilt record is a ratio ``dW_row / db_unit`` of the written layer's update, so any
update linear in the gradients serves: the gradient itself, SGD's ``-lr g`` (momentum
included), Adam's first step while ``|g| << eps`` (the crafted scale sees to it), and the
sum of several such steps. Neither the learning rate nor the sign is needed. Several steps
(FedAvg) blur the ratio as the weights move between them and as more records share a bin;
how much survives is measured (docs/dishonest_server.md), not assumed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from panoramia_fl.audit.adversary.crafted import CraftedModel

__all__ = ["rebuild", "update_of"]

SIGNAL_FLOOR = 1e-6
"""A bias difference below this share of the largest one is an empty bin (float rounding
of the site's weights leaves about 1e-7 of a step)."""


def _tensor(value: Any) -> torch.Tensor:
    return torch.as_tensor(np.asarray(value) if not isinstance(value, torch.Tensor) else value)


def update_of(crafted: CraftedModel, returned: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The site's update as the server computes it: its returned state dict (tensors or
    numpy arrays by the same keys, as a Flower ``ArrayRecord`` holds them) minus the crafted
    weights it was sent, in float64. Under secure aggregation the server subtracts what it
    sent each site, weighted as the sum weights them, from the sum instead: what is left is
    a linear combination of the sites' updates, which :func:`rebuild` reads as well."""
    return {
        key: _tensor(returned[key]).double() - sent.double()
        for key, sent in crafted.state_dict.items()
        if sent.is_floating_point()
    }


def _rows(crafted: CraftedModel, update: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """The written layer's (weight rows, bias) differences the attack reads: neighbouring
    units' differences for imprint (the last unit alone), each unit for trap."""
    weight = _tensor(update[f"{crafted.layer}.weight"]).double()[crafted.units]
    bias = _tensor(update[f"{crafted.layer}.bias"]).double()[crafted.units]
    if crafted.attack == "imprint":
        weight = torch.cat([weight[:-1] - weight[1:], weight[-1:]])
        bias = torch.cat([bias[:-1] - bias[1:], bias[-1:]])
    return weight, bias


def rebuild(
    crafted: CraftedModel,
    update: Mapping[str, Any],
    *,
    floor: float = SIGNAL_FLOOR,
) -> torch.Tensor:
    """The records ``crafted`` reads from ``update``, one row per non-empty bin (imprint) or
    active unit (trap), in the model's input space ``(n, *input_shape)``, float32.

    ``update`` is a gradient or a weight change by state-dict key (tensors or numpy arrays;
    :func:`update_of` makes one from returned weights). A bin with several records gives a
    blend of them, which the site's scoring does not count as any of its records. The dead
    model (``attack == "dead"``) reads nothing: an empty tensor.
    """
    if crafted.attack == "dead":
        return torch.zeros((0, *crafted.input_shape))
    weight, bias = _rows(crafted, update)
    largest = float(bias.abs().max()) if len(bias) else 0.0
    keep = bias.abs() > floor * largest if largest > 0 else torch.zeros_like(bias, dtype=torch.bool)
    rows = (weight[keep] / bias[keep, None]).float()
    if crafted.passthrough is None:
        return rows.reshape(len(rows), *crafted.input_shape)
    return crafted.passthrough.to_image(rows, crafted.input_shape)
