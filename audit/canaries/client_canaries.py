"""Canary clients: a one-run empirical estimate of client-level epsilon (no Flower here).

Andrew, Kairouz et al. (ICLR 2024), "One-shot Empirical Privacy Estimation for Federated
Learning". ``2K`` pseudorandom unit directions ``c_j`` are drawn over the flattened
trainable parameters; each is inserted by an independent fair coin (about ``K`` are), and an
inserted one is a virtual client whose update is ``c_j`` times the clipping norm. The others
are never inserted: the null. After training, the cosine of the model delta with each
direction is a statistic of that client. An unseen direction's cosine is about
``N(0, 1/d)``; an inserted one's is shifted by what the canary left in the model.

* :func:`pooled_gaussian_epsilon` (the estimate): the Gaussian mechanism's reading. Under
  it the inserted and null cosines share one variance (the setting of the paper's
  correctness result), so ``mu = mean gap / pooled std`` is read as mu-GDP, with an
  approximate 95% interval from the sampling error of ``mu``.
* :func:`gaussian_fit_epsilon` (a sensitivity reading): one normal per side, each with its own
  variance. Unequal variances make the privacy loss unbounded in the tails, so at a small
  delta its epsilon follows the sampling noise of the variance ratio, and only upwards.
  Neither is a bound.
* A lower bound: the 2K cosines as scores and the coins as inclusion in
  :func:`audit.stats.one_run.one_run_bound` (f-DP, Mahloujifar et al. 2025, guesses at the
  largest and smallest cosines, union bound over the guess grid at level beta). The one-run
  bounds need independent fair coins, which is why each direction gets its own coin instead
  of a fixed half being chosen.

Two threat models: ``final`` reads ``theta_T - theta_0`` (who sees the released model);
``all_iterates`` reads, per direction, the largest cosine with any round's delta
``theta_t - theta_{t-1}`` (who sees every global model).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Annotated, Literal

import numpy as np
import scipy

from panoramia_fl.audit.stats.one_run import Method, gdp_eps, one_run_bound
from panoramia_fl.contracts.json_values import NullAs

__all__ = [
    "CanaryClientDesign",
    "CanaryClientCosines",
    "ThreatEstimate",
    "ClientCanaryResult",
    "THREAT_MODELS",
    "ThreatModel",
    "estimate_threat",
    "pooled_gaussian_epsilon",
    "gaussian_fit_epsilon",
    "gaussian_pair_delta",
]

ThreatModel = Literal["final", "all_iterates"]
THREAT_MODELS: tuple[ThreatModel, ...] = ("final", "all_iterates")
LB_METHOD: Method = "fdp"
"""The one-run bound used for ``client_eps_lb`` (:mod:`audit.stats.one_run`)."""
_EPS_MAX = 1e4
_Z95 = 1.959963984540054
"""The two-sided 95% normal quantile."""


@dataclass(frozen=True)
class CanaryClientDesign:
    """``2 * count`` directions in ``dim`` dimensions and their coins, all from ``seed``."""

    count: int
    """K: half the directions (about K are inserted)."""
    dim: int
    seed: int

    def __post_init__(self) -> None:
        if self.count < 1 or self.dim < 2:
            raise ValueError(f"canary design needs count >= 1 and dim >= 2, got {self}")

    @property
    def n_directions(self) -> int:
        return 2 * self.count

    def included(self) -> np.ndarray:
        """One independent fair coin per direction (True: inserted)."""
        rng = np.random.default_rng([self.seed, 0xC0])
        return rng.random(self.n_directions) < 0.5

    def directions(self) -> np.ndarray:
        """``(2K, dim)`` float32 unit rows (a seeded Gaussian, normalised)."""
        rng = np.random.default_rng([self.seed, 0xD1])
        rows = rng.standard_normal((self.n_directions, self.dim), dtype=np.float32)
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        return rows


def cosines(directions: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """Cosine of ``delta`` (flat, ``dim``) with each unit row of ``directions``."""
    norm = float(np.linalg.norm(delta))
    if norm == 0.0:
        return np.zeros(directions.shape[0])
    return (directions @ delta.astype(np.float32)).astype(float) / norm


@dataclass
class CanaryClientCosines:
    """The cosines of both threat models, built round by round."""

    final: np.ndarray
    all_iterates: np.ndarray

    @classmethod
    def from_deltas(
        cls, directions: np.ndarray, round_deltas: Iterable[np.ndarray]
    ) -> CanaryClientCosines:
        """From each round's global delta (flat); the final delta is their sum."""
        total: np.ndarray | None = None
        best = np.full(directions.shape[0], -np.inf)
        for delta in round_deltas:
            best = np.maximum(best, cosines(directions, delta))
            total = delta.astype(np.float64) if total is None else total + delta
        if total is None:
            raise ValueError("canary cosines need at least one round")
        return cls(final=cosines(directions, total), all_iterates=best)

    def of(self, threat: ThreatModel) -> np.ndarray:
        return self.final if threat == "final" else self.all_iterates


def _log_prob_region(mean: float, std: float, lo: float, hi: float) -> float:
    """log P[lo < X < hi] for X ~ N(mean, std^2), from whichever tail is small."""
    a, b = (lo - mean) / std, (hi - mean) / std
    if a > 0:  # both in the upper tail: sf(a) - sf(b)
        la, lb = scipy.special.log_ndtr(-a), scipy.special.log_ndtr(-b)
    else:
        la, lb = scipy.special.log_ndtr(b), scipy.special.log_ndtr(a)
    if lb == -np.inf:
        return float(la)
    return float(la + np.log1p(-np.exp(min(lb - la, 0.0)))) if la > lb else -np.inf


def _regions(
    p: tuple[float, float], q: tuple[float, float], eps: float
) -> list[tuple[float, float]]:
    """Where log p(x) - log q(x) > eps, as open intervals."""
    (m1, s1), (m0, s0) = p, q
    # log p - log q = a x^2 + b x + c
    a = 1 / (2 * s0**2) - 1 / (2 * s1**2)
    b = m1 / s1**2 - m0 / s0**2
    c = m0**2 / (2 * s0**2) - m1**2 / (2 * s1**2) + math.log(s0 / s1) - eps
    if abs(a) <= 1e-9 * (1 / s0**2 + 1 / s1**2):  # equal variances: a half-line
        if b == 0:
            return [(-math.inf, math.inf)] if c > 0 else []
        root = -c / b
        return [(root, math.inf)] if b > 0 else [(-math.inf, root)]
    disc = b * b - 4 * a * c
    if disc <= 0:
        return [(-math.inf, math.inf)] if a > 0 else []
    r = sorted(((-b - math.sqrt(disc)) / (2 * a), (-b + math.sqrt(disc)) / (2 * a)))
    return [(-math.inf, r[0]), (r[1], math.inf)] if a > 0 else [(r[0], r[1])]


def gaussian_pair_delta(p: tuple[float, float], q: tuple[float, float], eps: float) -> float:
    """``sup_S P(S) - e^eps Q(S)`` for ``P = N(p)`` and ``Q = N(q)`` (mean, std)."""
    total = 0.0
    for lo, hi in _regions(p, q, eps):
        lp, lq = _log_prob_region(*p, lo, hi), _log_prob_region(*q, lo, hi)
        if lp > -np.inf:
            total += math.exp(lp) * -math.expm1(min(eps + lq - lp, 0.0))
    return max(total, 0.0)


def gaussian_fit_epsilon(inserted: np.ndarray, null: np.ndarray, *, delta: float) -> float:
    """Epsilon at ``delta`` between a normal fitted to ``inserted`` and one fitted to
    ``null`` (both directions of the pair; 0 when they are that close already)."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    if len(inserted) < 2 or len(null) < 2:
        raise ValueError("the Gaussian fit needs at least 2 inserted and 2 null cosines")
    p = (float(np.mean(inserted)), float(np.std(inserted, ddof=1)))
    q = (float(np.mean(null)), float(np.std(null, ddof=1)))
    if p[1] == 0 or q[1] == 0:
        raise ValueError("the Gaussian fit needs cosines that vary")
    best = 0.0
    for a, b in ((p, q), (q, p)):
        if gaussian_pair_delta(a, b, 0.0) <= delta:
            continue
        hi = 1.0
        while gaussian_pair_delta(a, b, hi) > delta:
            hi *= 2
            if hi > _EPS_MAX:
                return math.inf
        eps = scipy.optimize.brentq(
            lambda e, a=a, b=b: gaussian_pair_delta(a, b, e) - delta, 0.0, hi
        )
        best = max(best, float(eps))
    return best


def pooled_gaussian_epsilon(
    inserted: np.ndarray, null: np.ndarray, *, delta: float
) -> tuple[float, tuple[float, float]]:
    """Epsilon at ``delta`` of mu-GDP with ``mu = |mean gap| / pooled std``, and its
    approximate 95% interval.

    The interval maps ``mu +- 1.96 se`` through the GDP curve, with the large-sample
    standard error of a standardised mean difference,
    ``se^2 = 1/n1 + 1/n0 + mu^2 / (2 (n1 + n0))``.
    """
    n1, n0 = len(inserted), len(null)
    if n1 < 2 or n0 < 2:
        raise ValueError("the Gaussian fit needs at least 2 inserted and 2 null cosines")
    pooled = math.sqrt(
        ((n1 - 1) * np.var(inserted, ddof=1) + (n0 - 1) * np.var(null, ddof=1)) / (n1 + n0 - 2)
    )
    if pooled == 0:
        raise ValueError("the Gaussian fit needs cosines that vary")
    mu = abs(float(np.mean(inserted) - np.mean(null))) / pooled
    half = _Z95 * math.sqrt(1 / n1 + 1 / n0 + mu * mu / (2 * (n1 + n0)))
    low, high = (gdp_eps(mu=max(m, 0.0), delta=delta) for m in (mu - half, mu + half))
    return gdp_eps(mu=mu, delta=delta), (low, high)


@dataclass(frozen=True)
class ThreatEstimate:
    """One threat model's reading of the canaries."""

    threat: ThreatModel
    eps_estimate: float
    """The Gaussian mechanism's reading at ``delta`` (:func:`pooled_gaussian_epsilon`; an
    estimate, not a bound)."""
    eps_estimate_low: float
    eps_estimate_high: float
    """Its approximate 95% interval."""
    eps_estimate_two_variance: Annotated[float, NullAs(math.inf)]
    """The sensitivity reading with one variance per side (:func:`gaussian_fit_epsilon`);
    inf when unbounded."""
    eps_lb: float
    """f-DP one-run lower bound at ``delta``, level ``beta``."""
    lb_mu: float | None
    inserted_mean: float
    inserted_std: float
    null_mean: float
    null_std: float


def estimate_threat(
    threat: ThreatModel,
    values: np.ndarray,
    included: np.ndarray,
    *,
    delta: float,
    beta: float,
) -> ThreatEstimate:
    """Both readings of one threat model's cosines (``included``: the coins)."""
    inserted, null = values[included], values[~included]
    estimate, (low, high) = pooled_gaussian_epsilon(inserted, null, delta=delta)
    bound = one_run_bound(values, included.astype(int), method=LB_METHOD, beta=beta, delta=delta)
    return ThreatEstimate(
        threat=threat,
        eps_estimate=estimate,
        eps_estimate_low=low,
        eps_estimate_high=high,
        eps_estimate_two_variance=gaussian_fit_epsilon(inserted, null, delta=delta),
        eps_lb=bound.eps_lb,
        lb_mu=bound.mu,
        inserted_mean=float(np.mean(inserted)),
        inserted_std=float(np.std(inserted, ddof=1)),
        null_mean=float(np.mean(null)),
        null_std=float(np.std(null, ddof=1)),
    )


@dataclass(frozen=True)
class ClientCanaryResult:
    """``client_canaries.json``: what the canary clients measured in one run."""

    canary_clients: int
    """K (2K directions)."""
    inserted: int
    """Directions inserted (their coins came up heads)."""
    dim: int
    """Flattened trainable parameters the directions span."""
    rounds: int
    real_sites: int
    sites_per_round: int
    mean_canaries_per_round: float
    delta: float
    beta: float
    lb_method: str
    scale: str
    """``clipping norm`` (client-level DP) or ``median site update norm`` (no DP)."""
    accountant_epsilon: float | None
    """Client-level accountant's epsilon for a client in every round (None without DP)."""
    estimates: dict[str, ThreatEstimate]
    accuracy_with_canaries: float | None = None
    accuracy_without_canaries: float | None = None
    """Final global accuracy of the same run without canaries (its twin), when trained."""
    notes: list[str] = field(default_factory=list)

    @property
    def outweighed(self) -> bool:
        """Canaries outnumber the real sites in an average round."""
        return self.mean_canaries_per_round > self.sites_per_round

    @property
    def accuracy_cost(self) -> float | None:
        """Accuracy lost to the canaries (without minus with)."""
        if self.accuracy_with_canaries is None or self.accuracy_without_canaries is None:
            return None
        return self.accuracy_without_canaries - self.accuracy_with_canaries
