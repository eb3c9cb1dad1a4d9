"""Distributed client-level DP: a site clips its own round update and adds its share of the
noise before anything leaves it.

With ``n`` sites expected per round, each adds ``N(0, (z C)^2 / n)`` per coordinate to its
update clipped to L2 norm ``C``; the sum of the ``n`` shares is ``N(0, (z C)^2)``, which is
what Flower's central wrappers add (``z C / n`` on the uniform mean of ``n`` clipped
updates), so both settings release the same mechanism and share one accountant
(:mod:`server.client_dp`). What differs is who holds the unnoised updates: nobody but the
site here. The clipping follows Flower's (the L2 norm over every floating-point array of the
model; integer buffers go back as received, so they carry nothing of the site).

The noise is drawn as the site's DP-SGD noise is (:mod:`clients.noise`): from a generator
seeded by the run's seed, the round and the site in a simulation (reproducible), from the
OS's entropy on a deployment, and the ``secure_mode`` way there (the sum of four Gaussians).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from panoramia_fl.clients.noise import entropy_generator

_STREAM = 0xD157
"""Names the distributed noise's random stream, apart from the round's other draws."""

StateDict = dict[str, torch.Tensor]


@dataclass(frozen=True)
class DistributedDPSettings:
    """A site's share of distributed client-level DP (``dp.level: distributed``)."""

    noise_multiplier: float
    """z: the sum of the round's shares has std ``z * C``."""
    clipping_norm: float
    """C: the L2 norm each site clips its update to."""
    sites_per_round: int
    """n: the sites expected each round (the run's config says so; not the server)."""

    @property
    def share_std(self) -> float:
        """This site's noise std per coordinate, ``z C / sqrt(n)``."""
        return self.noise_multiplier * self.clipping_norm / math.sqrt(self.sites_per_round)


def noise_generator(*, seed: int | None, server_round: int, site_id: int) -> torch.Generator:
    """The round's noise generator: from ``seed`` (a simulation) or, with None, from the
    OS's entropy (a deployment)."""
    if seed is None:
        return entropy_generator(torch.device("cpu"))
    generator = torch.Generator()
    words = np.random.SeedSequence([seed, server_round, site_id, _STREAM]).generate_state(2)
    generator.manual_seed(int(words[0]) << 32 | int(words[1]))
    return generator


def clipped_update(global_state: StateDict, trained: StateDict, clipping_norm: float) -> StateDict:
    """``trained - global`` over the floating-point arrays, scaled to L2 norm at most
    ``clipping_norm`` (all arrays together, as Flower's ``compute_clip_model_update``)."""
    update = {
        k: trained[k].detach().double() - v.detach().double()
        for k, v in global_state.items()
        if v.is_floating_point()
    }
    norm = math.sqrt(sum(float((u * u).sum()) for u in update.values()))
    factor = min(1.0, clipping_norm / norm) if norm > 0 else 1.0
    return {k: u * factor for k, u in update.items()}


def add_share(
    update: StateDict,
    settings: DistributedDPSettings,
    generator: torch.Generator,
    *,
    secure_mode: bool = False,
) -> StateDict:
    """``update`` plus this site's share of the noise, ``N(0, share_std^2)`` per coordinate."""
    from opacus.optimizers.optimizer import _generate_noise  # heavy; DP sites only

    return {
        k: u
        + _generate_noise(
            std=settings.share_std, reference=u, generator=generator, secure_mode=secure_mode
        ).double()
        for k, u in update.items()
    }


def applied(global_state: StateDict, update: StateDict) -> StateDict:
    """The weights a site sends: the global ones plus ``update`` (each array in its own
    dtype); arrays without an update (integer buffers) go back as received."""
    return {
        k: (v.double() + update[k]).to(v.dtype) if k in update else v.clone()
        for k, v in global_state.items()
    }


def privatised(
    global_state: StateDict,
    trained: StateDict,
    settings: DistributedDPSettings,
    generator: torch.Generator,
    *,
    secure_mode: bool = False,
) -> StateDict:
    """The round's update clipped to ``C`` with this site's noise share (float64, floating
    arrays only): what leaves the site, in the clear or inside a secure sum."""
    update = clipped_update(global_state, trained, settings.clipping_norm)
    return add_share(update, settings, generator, secure_mode=secure_mode)
