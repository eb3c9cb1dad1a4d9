"""One local epoch: the training loop every trainer shares (a site's round, the helper and
reference models, the text generator)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn


def run_epoch(
    model: nn.Module,
    loader: Iterable[tuple[torch.Tensor, ...]],
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable[[tuple[torch.Tensor, ...]], torch.Tensor],
    device: torch.device,
    empty_step: Callable[[], None] | None = None,
) -> float:
    """One pass over ``loader``; returns the mean training loss. An empty batch (Poisson
    sampling draws them) runs ``empty_step``, or is skipped without one.

    The loss is summed on the device, in float64 (as a Python float would), and read once
    at the end: a read per step would make the host wait for each step, and the GPU for
    the host between steps."""
    total, count = torch.zeros((), dtype=torch.float64, device=device), 0
    for batch in loader:
        # A no-op for the task's loaders (records already on the device); Opacus's empty
        # Poisson batch is built on the host.
        batch = tuple(t.to(device) for t in batch)
        if len(batch[0]) == 0:
            if empty_step is not None:
                empty_step()
            continue
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(batch)
        loss.backward()
        optimizer.step()
        total += loss.detach().double() * len(batch[0])
        count += len(batch[0])
    return float(total) / max(count, 1)
