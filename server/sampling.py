"""How many sites a round samples: one rule for the strategy's sampling, the config's checks
and the accountants (kept free of Flower, so the config reads it without loading Flower)."""

from __future__ import annotations


def sites_per_round(num_sites: int, fraction: float) -> int:
    """Sites sampled each round: ``fraction`` of ``num_sites``, rounded, at least one."""
    return max(1, int(round(fraction * num_sites)))
