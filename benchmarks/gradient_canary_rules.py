"""How tight the white-box gradient-canary bounds can be: canary counts and guessing rules.

Simulates the exact mechanism a canary sees in a site's DP-SGD (no training): at each of
``--steps`` steps an inserted canary is sampled with probability ``--q`` and its observation
is N(1/sigma, 1), otherwise N(0, 1); sigma is Opacus's noise for the target eps (PRV
accountant). The per-canary statistic is the log-likelihood ratio the site accumulates
(:func:`audit.canaries.gradient_canaries.llr_increment`). For each eps and canary count it
prints the split-rule f-DP bound over ``--draws`` draws as a multiple of eps, for the rule the
product uses (chosen on one half by the union-penalised grid search) and for the unpenalised
best rule on that half, beside the Gaussian estimate.

Run: ``.venv/bin/python benchmarks/gradient_canary_rules.py [--canaries 20000 100000]``.
The default's parameters: q = 1/18, 1,152 steps (8 rounds x 8 local epochs of 18 batches).
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from panoramia_fl.audit.canaries.client_canaries import pooled_gaussian_epsilon
from panoramia_fl.audit.canaries.gradient_canaries import llr_increment, split_rule_bounds

DELTA = 1e-5
BETA = 0.05


def statistics(
    m: int, *, q: float, steps: int, sigma: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """The site's statistic for ``m`` canaries with fair coins, and the coins."""
    coins = rng.integers(0, 2, m).astype(bool)
    llr = np.zeros(m)
    for _ in range(steps):
        x = rng.standard_normal(m)
        x[coins & (rng.random(m) < q)] += 1.0 / sigma
        llr += llr_increment(x, sample_rate=q, noise_multiplier=sigma)
    return llr, coins


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--eps", type=float, nargs="+", default=[1.0, 2.0, 4.0, 8.0])
    parser.add_argument("--canaries", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--q", type=float, default=1 / 18)
    parser.add_argument("--steps", type=int, default=1_152)
    parser.add_argument("--draws", type=int, default=3)
    args = parser.parse_args()
    from opacus.accountants.utils import get_noise_multiplier

    print("eps  canaries  rule                  bound / eps over draws      estimate / eps")
    for eps in args.eps:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # Opacus's notes on RDP orders
            sigma = get_noise_multiplier(
                target_epsilon=eps,
                target_delta=DELTA,
                sample_rate=args.q,
                steps=args.steps,
                accountant="prv",
            )
        for m in args.canaries:
            found: dict[str, list[float]] = {"penalised (product)": [], "unpenalised best": []}
            estimates = []
            for draw in range(args.draws):
                rng = np.random.default_rng(1_000 * draw + m)
                llr, coins = statistics(m, q=args.q, steps=args.steps, sigma=sigma, rng=rng)
                for name, penalised in (("penalised (product)", True), ("unpenalised best", False)):
                    bound = split_rule_bounds(
                        llr,
                        coins,
                        beta=BETA,
                        delta=DELTA,
                        rng=np.random.default_rng(draw),
                        penalised=penalised,
                    )[3]
                    found[name].append(bound / eps)
                estimates.append(
                    pooled_gaussian_epsilon(llr[coins], llr[~coins], delta=DELTA)[0] / eps
                )
            for name, ratios in found.items():
                text = " ".join(f"{r:.2f}" for r in ratios)
                print(f"{eps:<4g} {m:>8,}  {name:<20}  {text:<26}  {np.mean(estimates):.2f}")


if __name__ == "__main__":
    main()
