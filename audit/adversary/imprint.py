"""Imprint (binning): the first fully connected layer made into bins of one measurement of
the record (Fowl et al., ICLR 2022, "Robbing the Fed").

Every row of the layer is the same measurement ``a`` (a random projection, or the mean
brightness of an image) and unit ``i``'s bias is ``-t_i``, with ``t_1 < ... < t_k``
quantiles of ``a . x`` over public records: unit ``i`` fires for the records with
``a . x > t_i``. The next layer's columns are all equal, so every unit receives the same
``dL/dh`` from a record; two neighbouring units' gradients then differ by exactly the
records whose measurement falls between their thresholds, and a bin holding one record
gives it back as ``(dW_i - dW_i+1) / (db_i - db_i+1)``. With ``n`` records in ``k`` bins
about ``exp(-n / k)`` of them are alone in theirs.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from panoramia_fl.audit.adversary.attacks import ATTACKS
from panoramia_fl.audit.adversary.crafted import CraftedModel, SiteOptimizer, calibrate, start
from panoramia_fl.audit.adversary.layers import features
from panoramia_fl.audit.adversary.passthrough import pass_through

__all__ = ["craft_imprint"]

Measure = Literal["projection", "brightness"]


def _measurement(width: int, kind: Measure, generator: torch.Generator) -> torch.Tensor:
    if kind == "brightness":
        return torch.full((width,), 1.0 / width)
    a = torch.randn(width, generator=generator)
    return a / a.norm()


@ATTACKS.register("imprint")
def craft_imprint(
    model: nn.Module,
    *,
    public: torch.Tensor,
    bins: int | None = None,
    seed: int,
    measure: Measure = "projection",
    optimizer: SiteOptimizer | None = None,
    batch_size: int = 64,
    resolution: float = 0.0,
) -> CraftedModel:
    """The imprint attack's weights for ``model`` (the agreed architecture; its own weights
    are left as they were).

    Parameters
    ----------
    public
        Public records (never the site's members) in the model's input space: the bin
        thresholds are their measurement's quantiles.
    bins
        Bins (at most the layer's units; all of them by default). Units past ``bins`` are
        left dead (their bias far below any measurement).
    measure
        ``projection`` (a random unit direction) or ``brightness`` (the mean).
    optimizer, batch_size, resolution
        The sites' agreed local step and batch size, and the smallest weight change the
        server can read (0: float64; a secure sum's fixed point: ``2**-32``): the weights'
        scale (see :func:`audit.adversary.crafted.calibrate`).
    """
    optimizer = optimizer or SiteOptimizer()
    crafted, name, first, second = start(model)
    public = public.float()
    passthrough = pass_through(crafted, first, public)
    k = first.out_features if bins is None else int(bins)
    if not 2 <= k <= first.out_features:
        raise ValueError(f"bins: between 2 and {first.out_features} (the layer's units), not {k}")
    generator = torch.Generator().manual_seed(seed)
    a = _measurement(first.in_features, measure, generator)
    m = features(crafted, first, public) @ a
    levels = torch.arange(1, k, dtype=torch.float64) / k
    inner = torch.quantile(m.double(), levels).float()
    low = m.min() - (m.max() - m.min())
    thresholds = torch.cat([low[None], inner])
    with torch.no_grad():
        first.weight.copy_(a.expand(first.out_features, -1))
        first.bias.fill_(-float(m.max() + 10 * (m.max() - m.min()) + 1))
        first.bias[:k] = -thresholds
        # One column for every unit: the same dL/dh for each (the difference of neighbours
        # then holds the bin's records only); positive next-layer biases keep its ReLUs on.
        column = torch.randn(second.out_features, generator=generator)
        second.weight.copy_(column[:, None].expand(-1, first.out_features))
        second.bias.copy_(second.bias.abs() + 0.1)
    notes = calibrate(
        crafted, public, optimizer=optimizer, batch=batch_size, seed=seed, resolution=resolution
    )
    return CraftedModel(
        attack="imprint",
        state_dict={key: v.detach().clone() for key, v in crafted.state_dict().items()},
        layer=name,
        units=torch.arange(k),
        input_shape=tuple(public.shape[1:]),
        thresholds=thresholds,
        passthrough=passthrough,
        notes=notes,
    )
