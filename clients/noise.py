"""Where a site's DP-SGD randomness comes from: the run's seed (simulation) or the operating
system's entropy (a real deployment).

Opacus's ``secure_mode`` needs ``torchcsprng``, whose last release (0.2.1, 2021) does not
build against current torch. On a real deployment the site instead seeds one
``torch.Generator`` from 64 bits of ``secrets`` (the OS's entropy), never from anything the
server sends, and uses it for both the Gaussian noise and the Poisson sampling masks; the
noise is drawn as ``secure_mode`` draws it (the sum of four Gaussians, one discarded draw
first), which resists the floating-point attacks on a single Gaussian sample. What remains:
torch's CPU generator is a Mersenne Twister, not a cryptographic generator; its outputs
never leave the site (only their sum with the clipped gradients), so its state cannot be
rebuilt from what the server sees, but the guarantee is that of a statistically good,
unpredictably seeded generator, not of a CSPRNG.
"""

from __future__ import annotations

import secrets
from typing import Any

import torch


def entropy_generator(device: torch.device) -> torch.Generator:
    """A generator on ``device`` seeded from the OS's entropy (64 bits of ``secrets``)."""
    generator = torch.Generator(device=device)
    generator.manual_seed(secrets.randbits(64))
    return generator


def draw_noise_securely(optimizer: Any, generator: torch.Generator) -> None:
    """Make an Opacus ``DPOptimizer`` draw its noise from ``generator`` the ``secure_mode``
    way (``opacus.optimizers.optimizer._generate_noise``: a discarded draw, then the sum of
    four Gaussians halved)."""
    optimizer.generator = generator
    optimizer.secure_mode = True
