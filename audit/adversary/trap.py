"""Trap weights: random rows shifted so that each unit fires for few records (Boenisch et
al., EuroS&P 2023, "When the curious abandon honesty").

Each unit of the first fully connected layer gets its own random direction ``w_i`` (no
repeated rows, so nothing as visible as imprint's identical ones) and a bias that places
its threshold at the ``1 - p`` quantile of ``w_i . x`` over public records, with ``p`` the
expected share of a batch it fires for. A unit that fires for exactly one record of the
batch gives that record back as ``dW_i / db_i``; a unit that fires for several gives a
blend. With ``k`` units and a batch of ``n`` at ``p = 1/n``, a record is alone in some unit
with probability about ``1 - exp(-k/(e n))``.
"""

from __future__ import annotations

import torch
from torch import nn

from panoramia_fl.audit.adversary.attacks import ATTACKS
from panoramia_fl.audit.adversary.crafted import CraftedModel, SiteOptimizer, calibrate, start
from panoramia_fl.audit.adversary.layers import features
from panoramia_fl.audit.adversary.passthrough import pass_through

__all__ = ["craft_trap"]


@ATTACKS.register("trap")
def craft_trap(
    model: nn.Module,
    *,
    public: torch.Tensor,
    units: int | None = None,
    seed: int,
    fires_for: float = 1.0,
    optimizer: SiteOptimizer | None = None,
    batch_size: int = 64,
    resolution: float = 0.0,
) -> CraftedModel:
    """Trap weights for ``model`` (the agreed architecture; its own weights are left as they
    were).

    Parameters
    ----------
    public
        Public records (never the site's members): each unit's threshold is a quantile of
        its projection over them.
    units
        Trap units (at most the layer's; all by default); the others are left dead.
    fires_for
        Records of a batch of ``batch_size`` each unit is meant to fire for.
    optimizer, batch_size, resolution
        The sites' agreed local step, batch size and the server's resolution (the weights'
        scale, as for imprint).
    """
    optimizer = optimizer or SiteOptimizer()
    crafted, name, first, second = start(model)
    public = public.float()
    passthrough = pass_through(crafted, first, public)
    k = first.out_features if units is None else int(units)
    if not 1 <= k <= first.out_features:
        raise ValueError(f"units: between 1 and {first.out_features}, not {k}")
    share = fires_for / batch_size
    if not 0 < share < 1:
        raise ValueError(f"fires_for: between 0 and batch_size ({batch_size}), not {fires_for}")
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randn(first.out_features, first.in_features, generator=generator)
    rows /= rows.norm(dim=1, keepdim=True)
    projections = features(crafted, first, public) @ rows.T
    cut = torch.quantile(projections.double(), 1.0 - share, dim=0).float()
    spread = projections.max() - projections.min()
    with torch.no_grad():
        first.weight.copy_(rows)
        first.bias.copy_(-cut)
        first.bias[k:] = -(projections.max() + 10 * spread + 1)
        # Positive next-layer biases keep its ReLUs on for every record.
        second.bias.copy_(second.bias.abs() + 0.1)
    notes = calibrate(
        crafted, public, optimizer=optimizer, batch=batch_size, seed=seed, resolution=resolution
    )
    return CraftedModel(
        attack="trap",
        state_dict={key: v.detach().clone() for key, v in crafted.state_dict().items()},
        layer=name,
        units=torch.arange(k),
        input_shape=tuple(public.shape[1:]),
        passthrough=passthrough,
        notes=notes,
    )
