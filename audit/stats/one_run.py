"""One-run lower bounds on epsilon from guesses with abstention: Steinke et al. and f-DP.

Both bounds read the same game. ``m`` candidates (canaries, or O(1)'s slots) are each
included by an independent fair coin; after one training run a guesser says "included" for
some, "excluded" for others and abstains on the rest. ``guesses`` counts the guesses made
(both kinds) and ``correct`` the right ones. Each bound rejects a privacy hypothesis when
that many correct guesses would be too unlikely under it.

* **Steinke, Nasr and Jagielski (2023)**, "Privacy auditing with one (1) training run".
  Under (eps, 0)-DP the correct count is dominated by ``Binomial(guesses, sigmoid(eps))``,
  so eps is rejected when ``P[Binomial(guesses, sigmoid(eps)) >= correct] <= beta``, i.e.
  ``sigmoid(eps)`` lies below the one-sided Clopper-Pearson bound. Under (eps, delta)-DP
  (their Theorem 5.2) a failure count ``F`` with ``E[F] <= 2 m delta`` may be added; the tail
  of ``F + Binomial`` is bounded by its worst case over such ``F``
  (:func:`audit.stats.bounds.closeness_relaxed_lower_bound` computes the same supremum for the
  generator's failures), which is at most Steinke et al.'s closed form.
* **Mahloujifar, Melis and Chaudhuri (2025)**, "Auditing f-Differential Privacy in One Run".
  The hypothesis is a whole trade-off curve, here Gaussian DP: ``mu``-GDP, under which a
  test with type-I error ``x`` has power at most ``Phi(Phi^-1(x) + mu)``. Their recursion
  (:func:`fdp_rejects`) starts from "``correct`` or more right guesses with probability
  ``beta``" and walks the correct count down to 0, adding at each count the least
  probability mass the trade-off curve allows (flipping one coin turns a right guess at
  count ``i + 1`` into a wrong one at count ``i``); if the guesses this forces exceed the
  ``guesses`` actually made, ``mu`` is rejected. The largest rejected ``mu`` is converted
  to eps at ``delta`` by the GDP formula
  ``delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)``.

  The f-DP bound is tighter because it tests one curve instead of a single (eps, delta)
  point: a Gaussian mechanism at the same eps is far less powerful at low false-positive
  rates than the worst (eps, delta)-DP mechanism the Binomial test must allow. Its eps is a
  lower bound on the GDP-equivalent eps: "the run is less private than any Gaussian
  mechanism with this eps at delta", which is a statement about eps at ``delta`` only for
  mechanisms whose trade-off curve is Gaussian (DP-SGD is close to one: a composition of
  many subsampled Gaussian steps).

Guesses (shared with :mod:`audit.stats.o1`): "included" for the ``k_plus`` highest scores,
"excluded" for the ``k_minus`` lowest, with both counts in :func:`audit.stats.o1.count_grid`.
:func:`one_run_bound` either takes the best pair with the union bound inside (each pair
tested at ``beta / n_pairs``: a bound at level ``beta``), or the best pair at ``beta`` each
(``idealised``: the search is not paid for), or one pre-set number of guesses split evenly
between the two ends (a single test at ``beta``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy

from panoramia_fl.audit.stats.bounds import (
    _check_beta,
    _check_inputs,
    _relaxed_p_lo,
    clopper_pearson_lower,
    logit,
)
from panoramia_fl.audit.stats.o1 import GuessPairs, count_grid, guess_pairs
from panoramia_fl.audit.stats.one_run_methods import DEFAULT_DELTA, METHOD_LABELS, METHODS, Method

__all__ = [
    "DEFAULT_DELTA",
    "METHODS",
    "METHOD_LABELS",
    "Method",
    "OneRunBound",
    "fdp_eps_lb",
    "fdp_mu_lb",
    "fdp_rejects",
    "gdp_delta",
    "gdp_eps",
    "one_run_bound",
    "steinke_eps_lb",
]


_MU_MAX = 64.0
"""Largest mu searched: at delta = 1e-5 its eps exceeds 2,000, beyond any audit's reach."""
_MU_TOL = 1e-7


def _check_counts(m: int, guesses: int, correct: int) -> None:
    if not 0 <= correct <= guesses <= m:
        raise ValueError(
            f"need 0 <= correct <= guesses <= m, got correct={correct}, guesses={guesses}, m={m}"
        )


def _check_delta(delta: float, *, positive: bool) -> float:
    delta = float(delta)
    ok = 0.0 < delta < 1.0 if positive else 0.0 <= delta < 1.0
    if not ok or math.isnan(delta):
        bounds = "(0, 1)" if positive else "[0, 1)"
        raise ValueError(f"delta must lie in {bounds}, got {delta!r}")
    return delta


def steinke_eps_lb(*, m: int, guesses: int, correct: int, beta: float, delta: float = 0.0) -> float:
    """Steinke et al.'s lower bound on eps at ``delta`` from one guessing rule.

    Parameters
    ----------
    m
        Candidates in the game (abstentions included).
    guesses, correct
        Guesses made and right ones.
    beta
        Level of this single test.
    delta
        The delta of the (eps, delta)-DP hypothesis; 0 gives the Clopper-Pearson bound of
        :func:`audit.stats.o1.o1_lower_bound` exactly.

    Returns
    -------
    float
        The largest eps rejected, clipped at 0.
    """
    beta = _check_beta(beta)
    delta = _check_delta(delta, positive=False)
    _check_counts(m, guesses, correct)
    if correct == 0:
        return 0.0
    p_lo = float(clopper_pearson_lower(correct, guesses, beta))
    if delta > 0.0:
        p_lo = _relaxed_p_lo(correct, guesses, beta, 2.0 * m * delta, p_lo)
    return max(0.0, float(logit(p_lo)))


def _blow_up_inverse(x: float, mu: float) -> float:
    """The least type-I error that gives power ``x`` against mu-GDP: Phi(Phi^-1(x) - mu)."""
    return float(scipy.special.ndtr(scipy.special.ndtri(x) - mu))


def fdp_rejects(*, mu: float, m: int, guesses: int, correct: int, beta: float) -> bool:
    """True when ``correct`` right guesses out of ``guesses`` reject mu-GDP at level ``beta``.

    The recursion of Mahloujifar et al. (their audit with abstention): ``r`` and ``h`` are
    the expected right and wrong guesses (per candidate) on outcomes with at least ``i``
    right ones, started at "``correct`` right with probability ``beta``". Walking ``i``
    down, the trade-off curve forces ``h_i >= Phi(Phi^-1(r_{i+1}) - mu)`` and the added
    outcomes (exactly ``i`` right) bring ``i / (guesses - i)`` right guesses per wrong one.
    If the least total ``r_0 + h_0`` exceeds ``guesses / m``, the guesses actually made, no
    mu-GDP run makes that many right guesses with probability ``beta``.
    """
    _check_counts(m, guesses, correct)
    if correct == 0:
        return False
    total = guesses / m
    r = beta * correct / m
    h = beta * (guesses - correct) / m
    for i in range(correct - 1, -1, -1):
        h_new = max(h, _blow_up_inverse(r, mu))
        if h_new == h:
            # Nothing moves at this count, so nothing moves at any lower one.
            break
        r = min(r + i / (guesses - i) * (h_new - h), 1.0)
        h = h_new
        if r + h > total:
            # r and h only grow from here: rejected already.
            return True
    return r + h > total


def fdp_mu_lb(*, m: int, guesses: int, correct: int, beta: float, floor: float = 0.0) -> float:
    """The largest mu that :func:`fdp_rejects` rejects (rejection is monotone in mu).

    ``floor``: a mu already reached elsewhere; when it is not rejected here, ``floor`` is
    returned after one recursion (the search over guessing rules prunes with it).
    """
    beta = _check_beta(beta)

    def rejects(mu: float) -> bool:
        return fdp_rejects(mu=mu, m=m, guesses=guesses, correct=correct, beta=beta)

    lo = max(0.0, float(floor))
    if not rejects(max(lo, _MU_TOL)):
        return lo
    hi = max(1.0, 2.0 * lo)
    while hi < _MU_MAX and rejects(hi):
        lo, hi = hi, 2.0 * hi
    if hi >= _MU_MAX and rejects(_MU_MAX):
        return _MU_MAX
    while hi - lo > _MU_TOL * max(1.0, lo):
        mid = 0.5 * (lo + hi)
        if rejects(mid):
            lo = mid
        else:
            hi = mid
    return lo


def gdp_delta(eps: float, mu: float) -> float:
    """delta(eps) of mu-GDP: Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)."""
    if mu <= 0.0:
        return 0.0
    a = float(scipy.special.log_ndtr(-eps / mu + mu / 2))
    b = eps + float(scipy.special.log_ndtr(-eps / mu - mu / 2))
    # log-space difference: e^eps overflows long before the product does.
    return math.exp(a) * -math.expm1(b - a) if b < a else 0.0


def gdp_eps(*, mu: float, delta: float) -> float:
    """The eps at which mu-GDP is (eps, delta)-DP (0 when delta(0) <= delta already)."""
    delta = _check_delta(delta, positive=True)
    if mu <= 0.0 or gdp_delta(0.0, mu) <= delta:
        return 0.0
    hi = max(1.0, mu * mu)
    while gdp_delta(hi, mu) > delta:
        hi *= 2.0
    return float(scipy.optimize.brentq(lambda e: gdp_delta(e, mu) - delta, 0.0, hi, xtol=1e-10))


def fdp_eps_lb(
    *, m: int, guesses: int, correct: int, beta: float, delta: float
) -> tuple[float, float]:
    """``(eps, mu)``: the f-DP (Gaussian) bound of one guessing rule, eps at ``delta``."""
    delta = _check_delta(delta, positive=True)
    mu = fdp_mu_lb(m=m, guesses=guesses, correct=correct, beta=beta)
    return gdp_eps(mu=mu, delta=delta), mu


@dataclass(frozen=True)
class OneRunBound:
    """A one-run lower bound and the guessing rule that reached it."""

    method: Method
    eps_lb: float
    """Lower bound on eps at ``delta`` (clipped at 0)."""
    mu: float | None
    """f-DP only: the largest Gaussian-DP mu rejected (eps_lb is its eps at delta)."""
    delta: float
    beta: float
    """The level asked for; each rule was tested at ``level``."""
    level: float
    idealised: bool
    """True: best rule of a search, each at ``beta`` (the search is not paid for)."""
    m: int
    guesses: int
    correct: int
    member_guesses: int
    nonmember_guesses: int
    threshold_low: float
    """Guess "excluded" for score < threshold_low (-inf: none)."""
    threshold_high: float
    """Guess "included" for score >= threshold_high (+inf: none)."""
    n_pairs_tried: int


def _search(
    pairs: GuessPairs, method: Method, level: float, delta: float
) -> tuple[int, int, float, float | None]:
    """Best valid pair ``(i, j, eps, mu)`` (``i = -1``: no valid pair).

    Pairs are visited by decreasing Clopper-Pearson bound. Steinke's bound never exceeds
    ``logit`` of it, so the walk stops there; f-DP's can, so every pair is tried, each
    costing one recursion once it cannot beat the best mu so far.
    """
    valid = pairs.valid
    g, c = pairs.guesses, pairs.correct
    p_cp = np.full(g.shape, -1.0)
    p_cp[valid] = clopper_pearson_lower(c[valid], g[valid], level)
    best: tuple[int, int, float, float | None] = (-1, -1, 0.0, None)
    best_value = 0.0  # eps for Steinke, mu for f-DP
    for flat in np.argsort(-p_cp, axis=None, kind="stable"):
        i, j = (int(x) for x in np.unravel_index(int(flat), g.shape))
        if not valid[i, j]:
            break
        if method == "steinke" and best[0] >= 0 and p_cp[i, j] <= scipy.special.expit(best_value):
            break
        k, right = int(g[i, j]), int(c[i, j])
        if method == "steinke":
            value = steinke_eps_lb(m=pairs.n, guesses=k, correct=right, beta=level, delta=delta)
        else:
            value = fdp_mu_lb(m=pairs.n, guesses=k, correct=right, beta=level, floor=best_value)
        if best[0] < 0 or value > best_value:
            best_value = value
            if method == "steinke":
                best = (i, j, value, None)
            else:
                best = (i, j, gdp_eps(mu=value, delta=delta), value)
    return best


@dataclass(frozen=True)
class _GuessingRules:
    """The guess counts per side to try and the level each pair is tested at."""

    k_plus: np.ndarray
    k_minus: np.ndarray
    n_pairs: int
    beta: float
    level: float
    idealised: bool


def _guessing_rules(
    m: int, *, guesses: int | None, beta: float, idealised: bool, grid_size: int
) -> _GuessingRules:
    """One pre-set count tested at ``beta``, or the count grid under its union bound."""
    if guesses is not None:
        if not 1 <= int(guesses) <= m:
            raise ValueError(f"guesses must lie in [1, {m}], got {guesses!r}")
        k = int(guesses)
        return _GuessingRules(
            k_plus=np.array([(k + 1) // 2]),
            k_minus=np.array([k // 2]),
            n_pairs=1,
            beta=beta,
            level=beta,
            idealised=False,
        )
    counts = count_grid(m, grid_size)
    n_pairs = counts.size**2 - 1
    return _GuessingRules(
        k_plus=counts,
        k_minus=counts,
        n_pairs=n_pairs,
        beta=beta,
        level=beta if idealised else beta / n_pairs,
        idealised=idealised,
    )


def _bound_of(
    pairs: GuessPairs,
    i: int,
    j: int,
    *,
    eps: float,
    mu: float | None,
    method: Method,
    rules: _GuessingRules,
    delta: float,
) -> OneRunBound:
    """The bound of pair ``(i, j)`` with its guessing rule's counts and thresholds."""
    low, high = pairs.thresholds(i, j)
    return OneRunBound(
        method=method,
        eps_lb=eps,
        mu=mu,
        delta=delta,
        beta=rules.beta,
        level=rules.level,
        idealised=rules.idealised,
        m=int(pairs.n),
        guesses=int(pairs.guesses[i, j]),
        correct=int(pairs.correct[i, j]),
        member_guesses=int(pairs.plus_guesses[i]),
        nonmember_guesses=int(pairs.minus_end[j]),
        threshold_low=low,
        threshold_high=high,
        n_pairs_tried=int(rules.n_pairs),
    )


def one_run_bound(
    scores: object,
    included: object,
    *,
    method: Method,
    beta: float,
    delta: float,
    guesses: int | None = None,
    idealised: bool = False,
    grid_size: int = 20,
) -> OneRunBound:
    """One-run lower bound on eps at ``delta`` from scores and inclusion coins.

    Parameters
    ----------
    scores
        One score per candidate, shape ``(m,)``; higher = guessed "included".
    included
        The coins: 1 = included (trained on), 0 = not; both must occur.
    method
        ``"steinke"`` (Binomial test, (eps, delta)-DP) or ``"fdp"`` (Gaussian-DP curve).
    beta
        Level in (0, 1).
    delta
        delta of the reported eps; ``"fdp"`` needs it positive (mu-GDP is not (eps, 0)-DP
        for any finite eps).
    guesses
        A pre-set number of guesses: ``ceil(K/2)`` highest and ``floor(K/2)`` lowest
        scores (their tie groups whole), one test at ``beta``. None: search the count grid.
    idealised
        With the grid search: test each pair at ``beta`` instead of ``beta / n_pairs``.
    grid_size
        Counts per side of the grid (:func:`audit.stats.o1.count_grid`).

    Returns
    -------
    OneRunBound
        The bound and its guessing rule (the best pair when searching).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    beta = _check_beta(beta)
    delta = _check_delta(delta, positive=method == "fdp")
    t, s = _check_inputs(scores, included)
    rules = _guessing_rules(
        t.size, guesses=guesses, beta=beta, idealised=idealised, grid_size=grid_size
    )
    pairs = guess_pairs(t, s, rules.k_plus, rules.k_minus)
    i, j, eps, mu = _search(pairs, method, rules.level, delta)
    if i < 0:  # no valid pair (a fixed K whose two ends overlap through ties)
        raise ValueError(f"guesses={guesses}: the two ends overlap through tied scores")
    return _bound_of(pairs, i, j, eps=eps, mu=mu, method=method, rules=rules, delta=delta)
