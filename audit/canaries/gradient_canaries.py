"""White-box one-run audit of a site's DP-SGD with gradient canaries (numpy only).

A site running DP-SGD draws ``m = 2K`` canaries, each with an independent fair coin, before
training. Canary ``j`` owns coordinate ``j`` of a *phantom block*: parameters that no record's
loss touches, clipped and noised by the site's DP optimizer's own code beside the model's
(Dirac canaries on coordinates no real gradient reaches). An inserted canary (coin 1) is a
phantom record: at every step a copy of the site's sampler draws it at the site's real rate,
and its clipped per-sample gradient ``C e_j`` joins the noisy sum; a never-inserted one only
receives noise (:mod:`clients.real_path_canaries`). Two threat levels are read, each a
statistic per canary accumulated at the site:

* ``mechanism``: every noisy summed gradient, what the DP guarantee covers. With
  ``x_t = <noisy sum_t, e_j> / (sigma C)`` (``N(1/sigma, 1)`` when canary ``j`` was sampled,
  ``N(0, 1)`` otherwise) the log-likelihood ratio of "inserted" over "not inserted",
  ``L_j = sum_t log(1 - q + q exp(x_t / sigma - 1 / (2 sigma^2)))``, is the most powerful test
  of the coin (Neyman-Pearson), so its bounds approach the mechanism's true privacy
  (:func:`llr_increment`).
* ``server``: the round updates the site sends (local steps hidden). The phantom block is
  stepped by the site's own optimizer from zero each round; the statistic is the sum over
  rounds of the round's update along ``-e_j``, each round scaled by its spread over all
  canaries.

Validity: the coins are independent of everything else and the real records' gradients have
no component on the phantom block, so every never-inserted coordinate is pure noise and the
coins of the inserted ones are the only link between coin and statistic. Any statistic of the
site's outputs then gives a valid one-run bound (Steinke et al. 2023; Mahloujifar et al.
2025), provided the guessing rule does not look at the coins it is tested on: the canaries
are split in half at random, the rule (thresholds with abstention) is chosen on one half with
its coins and tested once on the other (:func:`split_rule_bounds`); the site's four bounds
(the f-DP and Steinke readings of each level) share ``beta``, ``beta / 4`` each.

Beside the bounds, an estimate: a Gaussian fitted to each group's statistic (inserted, never
inserted) and the Gaussian-DP epsilon of their standardised gap at ``delta``
(:func:`audit.canaries.client_canaries.pooled_gaussian_epsilon`), with its approximate 95% interval
over the canaries of this one run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np

from panoramia_fl.audit.canaries.client_canaries import pooled_gaussian_epsilon
from panoramia_fl.audit.conformance.checks import ConformanceResult
from panoramia_fl.audit.stats.one_run import fdp_eps_lb, one_run_bound, steinke_eps_lb
from panoramia_fl.contracts.json_values import NullAs

__all__ = [
    "MIN_GRADIENT_CANARIES",
    "READINGS",
    "reading_level",
    "STATISTICS",
    "THREAT_LEVELS",
    "GradientCanaryResult",
    "LevelAudit",
    "ThreatLevel",
    "audit_level",
    "gradient_canary_audit",
    "llr_increment",
    "split_rule_bounds",
]

ThreatLevel = Literal["mechanism", "server"]
THREAT_LEVELS: tuple[ThreatLevel, ...] = ("mechanism", "server")

STATISTICS: dict[ThreatLevel, str] = {
    "mechanism": "log-likelihood ratio over every noisy summed gradient (subsampled Gaussian)",
    "server": "round updates along the canary, each round scaled by its spread, summed",
}
"""What each threat level's statistic is, as reports name it."""

MIN_GRADIENT_CANARIES = 100
"""Fewest canary pairs (``K``) an audit accepts: fewer give a one-run bound no power."""

READINGS = ("fdp", "steinke")
"""The one-run readings of each threat level's guesses."""


def reading_level(beta: float) -> float:
    """The level of each white-box bound: the site's four (two readings of each of the two
    threat levels) share ``beta``, as the two-sided game's four bounds do."""
    return beta / (len(READINGS) * len(THREAT_LEVELS))


def llr_increment(x: np.ndarray, *, sample_rate: float, noise_multiplier: float) -> np.ndarray:
    """One step's log-likelihood ratio per canary, ``log(1 - q + q exp(x/s - 1/(2 s^2)))``.

    ``x`` is the noisy sum along each canary divided by ``noise_multiplier * C``.
    """
    s = noise_multiplier
    return np.log1p(sample_rate * np.expm1(x / s - 1.0 / (2.0 * s * s)))


@dataclass(frozen=True)
class LevelAudit:
    """One threat level's reading of the canaries."""

    level: ThreatLevel
    statistic: str
    m_tested: int
    """Canaries in the test half (the bounds' ``m``)."""
    guesses: int
    correct: int
    eps_lb_fdp: float
    """f-DP (Gaussian) lower bound on eps at ``delta``, level ``beta / 4``."""
    fdp_mu: float
    eps_lb_steinke: float
    """Steinke et al.'s lower bound on eps at ``delta``, level ``beta / 4``."""
    eps_estimate: float
    """Gaussian-fit estimate of eps at ``delta`` over every canary (not a bound)."""
    eps_estimate_low: float
    eps_estimate_high: float
    """Approximate 95% interval of the estimate, over the canaries of this run."""
    threshold_low: Annotated[float, NullAs(-math.inf)]
    threshold_high: Annotated[float, NullAs(math.inf)]
    """The rule chosen on the selection half: guess "not inserted" below ``threshold_low``,
    "inserted" at or above ``threshold_high``."""


@dataclass(frozen=True)
class GradientCanaryResult:
    """A site's white-box gradient-canary audit: both threat levels and what they saw."""

    n_canaries: int
    n_inserted: int
    steps: int
    """Noisy gradient steps observed (all rounds)."""
    rounds: int
    overhead_s: float
    """Training time the canaries and the conformance hooks added at the site (their
    accuracy cost is nil: they never touch the model)."""
    sample_rate: float
    noise_multiplier: float
    """The noise multiplier the site's accountant assumed."""
    max_grad_norm: float
    beta: float
    delta: float
    levels: dict[str, LevelAudit]
    conformance: ConformanceResult | None = None
    """The conformance checks of the site's real DP-SGD steps (:mod:`audit.conformance.checks`);
    None in audits older than them."""

    @property
    def mechanism(self) -> LevelAudit | None:
        """Every noisy summed gradient (what the DP guarantee covers)."""
        return self.levels.get("mechanism")

    @property
    def server(self) -> LevelAudit | None:
        """The round updates the site sends."""
        return self.levels.get("server")


def split_rule_bounds(
    scores: np.ndarray,
    coins: np.ndarray,
    *,
    beta: float,
    delta: float,
    rng: np.random.Generator,
    penalised: bool = True,
) -> tuple[int, int, int, float, float, float, float, float]:
    """Choose a guessing rule on a random half, test it once on the other half.

    Returns ``(m_tested, guesses, correct, eps_fdp, mu, eps_steinke, low, high)``. The
    selection half's coins pick the thresholds; the test half's coins are independent of
    them, so each bound is one test, at :func:`reading_level` (``beta / 4``: the site's four
    white-box bounds together hold at ``beta``).

    The rule is the one the union-bound grid search (:func:`audit.stats.one_run.one_run_bound`)
    picks on the selection half: its penalty favours rules with enough guesses to hold up on
    fresh canaries. ``penalised=False`` takes the unpenalised best rule instead, often a
    lucky handful of guesses that the test half does not repeat (0.00-0.59 x eps at eps = 1
    against 0.59-0.69 x, ``benchmarks/gradient_canary_rules.py``); kept for that comparison.
    """
    order = rng.permutation(scores.size)
    pick, test = order[: scores.size // 2], order[scores.size // 2 :]
    chosen = one_run_bound(
        scores[pick],
        coins[pick].astype(int),
        method="fdp",
        beta=beta,
        delta=delta,
        idealised=not penalised,
    )
    low, high = chosen.threshold_low, chosen.threshold_high
    t, s = scores[test], coins[test]
    says_in, says_out = t >= high, t < low
    guesses = int(says_in.sum() + says_out.sum())
    correct = int((says_in & s).sum() + (says_out & ~s).sum())
    if guesses == 0:
        return test.size, 0, 0, 0.0, 0.0, 0.0, low, high
    level = reading_level(beta)
    eps_fdp, mu = fdp_eps_lb(m=test.size, guesses=guesses, correct=correct, beta=level, delta=delta)
    eps_st = steinke_eps_lb(m=test.size, guesses=guesses, correct=correct, beta=level, delta=delta)
    return test.size, guesses, correct, eps_fdp, mu, eps_st, low, high


def audit_level(
    level: ThreatLevel,
    scores: np.ndarray,
    coins: np.ndarray,
    *,
    beta: float,
    delta: float,
    seed: int,
) -> LevelAudit:
    """Bounds and estimate of one threat level (higher score: guessed "inserted")."""
    scores = np.asarray(scores, dtype=float)
    coins = np.asarray(coins, dtype=bool)
    if scores.shape != coins.shape or scores.ndim != 1:
        raise ValueError(f"{level}: one score per canary, got {scores.shape} and {coins.shape}")
    if not np.isfinite(scores).all():
        raise ValueError(f"{level}: canary statistics must be finite")
    if coins.all() or not coins.any():
        raise ValueError(f"{level}: the canary coins must include both values")
    m, guesses, correct, eps_fdp, mu, eps_st, low, high = split_rule_bounds(
        scores, coins, beta=beta, delta=delta, rng=np.random.default_rng(seed)
    )
    estimate, (est_low, est_high) = pooled_gaussian_epsilon(
        scores[coins], scores[~coins], delta=delta
    )
    return LevelAudit(
        level=level,
        statistic=STATISTICS[level],
        m_tested=m,
        guesses=guesses,
        correct=correct,
        eps_lb_fdp=eps_fdp,
        fdp_mu=mu,
        eps_lb_steinke=eps_st,
        eps_estimate=estimate,
        eps_estimate_low=est_low,
        eps_estimate_high=est_high,
        threshold_low=float(low),
        threshold_high=float(high),
    )


def gradient_canary_audit(
    statistics: dict[ThreatLevel, np.ndarray],
    coins: np.ndarray,
    *,
    steps: int,
    rounds: int,
    overhead_s: float,
    sample_rate: float,
    noise_multiplier: float,
    max_grad_norm: float,
    beta: float,
    delta: float,
    seed: int,
    conformance: ConformanceResult | None = None,
) -> GradientCanaryResult:
    """Audit every threat level in ``statistics`` against the canaries' ``coins``.

    Each level's rule is chosen and tested on its own random split (``seed``); the four
    bounds share ``beta`` (:func:`reading_level`). ``conformance``: the site's checks of its
    real steps, carried along.
    """
    coins = np.asarray(coins, dtype=bool)
    levels: dict[str, LevelAudit] = {
        name: audit_level(name, statistics[name], coins, beta=beta, delta=delta, seed=seed + i)
        for i, name in enumerate(THREAT_LEVELS)
        if name in statistics
    }
    return GradientCanaryResult(
        n_canaries=int(coins.size),
        n_inserted=int(coins.sum()),
        steps=int(steps),
        rounds=int(rounds),
        overhead_s=float(overhead_s),
        sample_rate=float(sample_rate),
        noise_multiplier=float(noise_multiplier),
        max_grad_norm=float(max_grad_norm),
        beta=float(beta),
        delta=float(delta),
        levels=levels,
        conformance=conformance,
    )
