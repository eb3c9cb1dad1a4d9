"""The distributions behind a site's DP-SGD conformance checks (numpy and scipy only).

Each function gives a tail probability (a p-value) of one statistic under the hypothesis
that the site's DP-SGD does what its accountant assumes; :mod:`audit.conformance.checks`
compares it with the check's share of beta.
"""

from __future__ import annotations

import numpy as np
import scipy

__all__ = [
    "binomial_sum_tails",
    "count_pmf",
    "dispersion_p",
    "kurtosis_moments",
    "kurtosis_z",
    "largest_pair_correlation",
    "normal_p",
    "unit_correlation_sf",
]


def normal_p(z: float, *, side: str) -> float:
    """The p-value of a standard normal ``z``: ``"low"``, ``"high"`` or ``"both"`` tails."""
    low, high = float(scipy.stats.norm.cdf(z)), float(scipy.stats.norm.sf(z))
    return {"low": low, "high": high, "both": min(1.0, 2.0 * min(low, high))}[side]


def dispersion_p(statistic: float, *, mean: float, variance: float, side: str) -> float:
    """The p-value of a sum of squared standardised deviations, read on the gamma law with
    its exact mean and variance (chi-square-like at few terms, normal at many)."""
    shape, scale = mean * mean / variance, variance / mean
    low = float(scipy.stats.gamma.cdf(statistic, shape, scale=scale))
    high = float(scipy.stats.gamma.sf(statistic, shape, scale=scale))
    return {"low": low, "high": high, "both": min(1.0, 2.0 * min(low, high))}[side]


def binomial_sum_tails(total: int, *, trials: int, rates: np.ndarray) -> tuple[float, float]:
    """``P(X <= total)`` and ``P(X >= total)`` for ``X`` the sum of ``Binomial(trials, q)``
    over ``rates``: exact when every rate is the same, else the normal law with a
    continuity correction."""
    rates = np.asarray(rates, dtype=float)
    if np.all(rates == rates[0]):
        law = scipy.stats.binom(trials * rates.size, rates[0])
        return float(law.cdf(total)), float(law.sf(total - 1))
    mean = trials * rates.sum()
    sd = float(np.sqrt(trials * (rates * (1 - rates)).sum()))
    return float(scipy.stats.norm.cdf((total + 0.5 - mean) / sd)), float(
        scipy.stats.norm.sf((total - 0.5 - mean) / sd)
    )


def count_pmf(groups: list[tuple[int, float]]) -> np.ndarray:
    """The law of one record's inclusion count: the sum of ``Binomial(trials, q)`` over
    ``groups`` (a pmf over 0..sum of trials)."""
    pmf = np.ones(1)
    for trials, q in groups:
        pmf = np.convolve(pmf, scipy.stats.binom.pmf(np.arange(trials + 1), trials, q))
    return pmf


def kurtosis_moments(n: int) -> tuple[float, float]:
    """Mean and variance of ``b = n sum x^4 / (sum x^2)^2`` for ``n`` iid centred Gaussian
    coordinates (exact: ``x^2 / sum x^2`` is Dirichlet(1/2, ..., 1/2))."""
    mean = 3.0 * n / (n + 2)
    second = n * n * (9.0 * n + 96.0) / ((n + 2.0) * (n + 4.0) * (n + 6.0))
    return mean, second - mean * mean


def kurtosis_z(b: np.ndarray, n: int) -> np.ndarray:
    """``b`` (:func:`kurtosis_moments`) made standard normal under Gaussian noise by Anscombe
    and Glynn's (1983) transformation, which takes out its right skew (the plain normal
    reading gives 1.7 x the nominal rate in the upper tail at n = 3,574)."""
    mean, var = kurtosis_moments(n)
    x = (np.asarray(b, float) - mean) / np.sqrt(var)
    skew = (
        6.0
        * (n * n - 5 * n + 2)
        / ((n + 7) * (n + 9))
        * np.sqrt(6.0 * (n + 3) * (n + 5) / (n * (n - 2) * (n - 3)))
    )
    a = 6.0 + 8.0 / skew * (2.0 / skew + np.sqrt(1 + 4.0 / skew**2))
    denom = 1 + x * np.sqrt(2 / (a - 4.0))
    root = np.sign(denom) * np.cbrt((1 - 2.0 / a) / np.abs(denom))
    return (1 - 2 / (9.0 * a) - root) / np.sqrt(2 / (9.0 * a))


def unit_correlation_sf(c: float, k: int) -> float:
    """``P(|<w, w'>| >= c)`` for independent directions ``w, w'`` uniform on the unit sphere
    of ``R^k`` (``<w, w'>^2`` is Beta(1/2, (k - 1)/2))."""
    return float(scipy.stats.beta.sf(c * c, 0.5, (k - 1) / 2.0))


def largest_pair_correlation(rows: np.ndarray, *, chunk: int = 2048) -> tuple[float, int, int]:
    """The largest ``|cosine|`` between two different rows and the pair ``(i, j)``, ``i < j``,
    computed a block of rows at a time (memory ``chunk x rows``)."""
    norms = np.linalg.norm(rows, axis=1)
    units = rows / np.where(norms > 0, norms, 1.0)[:, None]
    best, pair = 0.0, (0, 0)
    for start in range(0, len(units), chunk):
        block = np.abs(units[start : start + chunk] @ units.T)
        rows_in = np.arange(start, start + len(block))
        block[np.arange(units.shape[0])[None, :] <= rows_in[:, None]] = 0.0  # each pair once
        i, j = np.unravel_index(int(np.argmax(block)), block.shape)
        if block[i, j] > best:
            best, pair = float(block[i, j]), (int(start + i), int(j))
    return best, pair[0], pair[1]
