"""Statistical core of the audit: lower confidence bounds from membership scores.

PANORAMIA (Proposition 1 / 2 of the paper) turns a score vector ``t`` and the game's
membership bits ``s`` into a test: for a threshold, ``r`` records are predicted members and
``tp`` of them are members. Under the hypothesis (generator c-close, model eps-DP), ``tp`` is
stochastically dominated by ``Binomial(r, sigmoid(theta))`` with ``theta = c`` for the
baseline and ``theta = c + eps`` for the MIA. The largest ``theta`` rejected at level
``beta'`` is ``logit(p_lo)`` with ``p_lo`` the one-sided Clopper-Pearson lower confidence
bound of ``tp / r``::

    p_lo = sup {p : P[Binomial(r, p) >= tp] <= beta'} = BetaInv(beta'; tp, r - tp + 1)

(``p_lo = 0`` when ``tp = 0``). The bound is maximised over thresholds with a union bound,
``beta' = beta / (number of thresholds)``.

Thresholds. By default every distinct score level is a threshold (a record is predicted a
member when its score is ``>=`` the level; ties are never split). The propositions hold
conditionally on the observed score vector, so the set of distinct levels is fixed when the
test is made and ``beta / n_levels`` (``n_levels <= m``) is a valid union bound. With
``threshold_grid=G`` the thresholds are the scores of the ``ceil(j m / G)``-th highest record,
``j = 1..G`` (top-``j/G`` quantiles) and ``beta' = beta / G``; with ``spacing="geometric"``
they are the ``k``-th highest for ``k`` in about ``G`` geometrically spaced counts from 1 to
``m`` (:func:`geometric_counts`), which resolves the few most confident guesses finely and
the bulk coarsely, and ``beta'`` divides by the number of counts. Every choice depends on the
scores only through their order, so every bound here is invariant to strictly increasing
transforms of the scores.

The returned bounds are raw logits: they can be negative (precision below 1/2 at every
threshold). ``c`` and ``eps`` are non-negative by definition, so callers may clip at 0.

Also here: the Hoeffding form of the same test (the paper's Equation (1), looser), the
Appendix E relaxations ((c, gamma)-closeness and (eps, delta)-DP), the ceiling (the bound a
perfect scorer reaches on an audit set) and the bound-vs-recall curve. The O(1) black-box
bound of Steinke et al. (2023) lives in :mod:`audit.stats.o1`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import scipy

from panoramia_fl.audit.result import BoundSummary, Curve

__all__ = [
    "approx_dp_lower_bound",
    "bound_curve",
    "ceiling",
    "clopper_pearson_lower",
    "closeness_relaxed_lower_bound",
    "hoeffding_lower_bound",
    "logit",
    "lower_bound",
    "split_ceiling",
    "split_lower_bound",
    "thresholds_tried",
]


# --------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------


def logit(p: np.ndarray | float) -> np.ndarray | float:
    """``log(p / (1 - p))``; ``-inf`` at 0 and ``+inf`` at 1."""
    p_arr = np.asarray(p, dtype=float)
    with np.errstate(divide="ignore"):
        out = np.log(p_arr) - np.log1p(-p_arr)
    return float(out) if np.ndim(out) == 0 else out


def clopper_pearson_lower(
    tp: np.ndarray | int, r: np.ndarray | int, level: float
) -> np.ndarray | float:
    """One-sided Clopper-Pearson lower confidence bound of ``tp / r`` at ``level``.

    The largest ``p`` with ``P[Binomial(r, p) >= tp] <= level``; 0 where ``tp == 0``.
    Vectorised over ``tp`` and ``r``.
    """
    tp_arr, r_arr = np.broadcast_arrays(np.asarray(tp, dtype=float), np.asarray(r, dtype=float))
    # P[Bin(r, p) >= tp] = I_p(tp, r - tp + 1), so the boundary is the inverse regularised
    # incomplete beta function (scipy.stats.beta.ppf without its argument checks). tp = 0 is
    # evaluated at tp = 1 and then zeroed: cheaper than fancy indexing on 10^6 levels.
    tp_safe = np.maximum(tp_arr, 1.0)
    out = np.asarray(scipy.special.betaincinv(tp_safe, r_arr - tp_safe + 1.0, level), dtype=float)
    out[tp_arr <= 0] = 0.0
    return float(out) if out.ndim == 0 else out


def _check_beta(beta: float) -> float:
    beta = float(beta)
    if not (0.0 < beta < 1.0) or math.isnan(beta):
        raise ValueError(f"beta must lie in (0, 1), got {beta!r}")
    return beta


def _check_inputs(scores: object, membership: object) -> tuple[np.ndarray, np.ndarray]:
    """Validate and convert (scores, membership); clear errors naming the problem."""
    t = np.asarray(scores, dtype=float)
    if t.ndim != 1:
        raise ValueError(f"scores must be one-dimensional, got shape {t.shape}")
    s_raw = np.asarray(membership)
    if s_raw.ndim != 1:
        raise ValueError(f"membership must be one-dimensional, got shape {s_raw.shape}")
    if t.size != s_raw.size:
        raise ValueError(
            f"scores and membership differ in length: {t.size} scores, {s_raw.size} labels"
        )
    if t.size == 0:
        raise ValueError("scores and membership are empty: nothing to audit")
    n_nan = int(np.isnan(t).sum())
    if n_nan:
        first = int(np.flatnonzero(np.isnan(t))[0])
        raise ValueError(f"scores contain {n_nan} NaN value(s) (first at index {first})")
    s_float = s_raw.astype(float)
    bad = ~np.isin(s_float, (0.0, 1.0))
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"membership labels must be 0 or 1; found {s_raw[first]!r} at index {first}"
        )
    s = s_float.astype(np.int64)
    n_members = int(s.sum())
    if n_members == 0:
        raise ValueError("membership has no members (all labels are 0): bound undefined")
    if n_members == s.size:
        raise ValueError("membership has no non-members (all labels are 1): bound undefined")
    return t, s


Spacing = Literal["quantile", "geometric"]
"""How a ``threshold_grid`` of size G places its thresholds (see the module docstring)."""


def geometric_counts(n: int, size: int) -> np.ndarray:
    """About ``size`` distinct, geometrically spaced counts in ``[1, n]`` (1 and n included)."""
    if size < 1:
        raise ValueError(f"a geometric grid needs at least one count, got {size!r}")
    if n < 1:
        raise ValueError(f"need at least one record, got n={n!r}")
    return np.unique(np.rint(np.geomspace(1, n, size)).astype(np.int64))


@dataclass(frozen=True)
class _Levels:
    """Candidate thresholds with their counts, ordered from the highest score down."""

    threshold: np.ndarray  # score level
    r: np.ndarray  # predicted members (score >= threshold)
    tp: np.ndarray  # true positives among them
    n_tests: int  # number of thresholds in the union bound
    n_members: int


def _levels(
    t: np.ndarray, s: np.ndarray, threshold_grid: int | None, spacing: Spacing = "quantile"
) -> _Levels:
    """Thresholds to try: every distinct score level, or a fixed grid of ranks."""
    m = t.size
    order = np.argsort(-t, kind="stable")
    t_sorted = t[order]
    cum_tp = np.cumsum(s[order])
    # Last index of each run of equal scores: a threshold takes the whole tie group.
    last = np.flatnonzero(np.append(t_sorted[1:] != t_sorted[:-1], True))
    if threshold_grid is None:
        return _Levels(
            threshold=t_sorted[last],
            r=last + 1,
            tp=cum_tp[last],
            n_tests=int(last.size),
            n_members=int(cum_tp[-1]),
        )
    grid = int(threshold_grid)
    if grid < 1 or grid != threshold_grid:
        raise ValueError(f"threshold_grid must be a positive integer, got {threshold_grid!r}")
    if spacing == "geometric":
        k = geometric_counts(m, grid)
        grid = int(k.size)
    elif spacing == "quantile":
        k = -(-np.arange(1, grid + 1) * m // grid)  # ceil(j m / G): the top-j/G quantile
    else:
        raise ValueError(f"spacing must be 'quantile' or 'geometric', got {spacing!r}")
    # Extend each rank to the end of its tie group; equal thresholds collapse to one point
    # but the union bound still counts all G tests (fixed before looking at the data).
    group_end = last[np.searchsorted(last, k - 1)]
    group_end = np.unique(group_end)
    return _Levels(
        threshold=t_sorted[group_end],
        r=group_end + 1,
        tp=cum_tp[group_end],
        n_tests=grid,
        n_members=int(cum_tp[-1]),
    )


def thresholds_tried(scores: object, *, threshold_grid: int | None = None) -> int:
    """Number of thresholds in the union bound: distinct score levels, or ``threshold_grid``."""
    t = np.asarray(scores, dtype=float)
    if threshold_grid is not None:
        return int(threshold_grid)
    return int(np.unique(t).size)


def _summary(lv: _Levels, p_lo: np.ndarray, beta: float, idx: int | None = None) -> BoundSummary:
    i = int(np.argmax(p_lo)) if idx is None else idx
    r, tp = int(lv.r[i]), int(lv.tp[i])
    return BoundSummary(
        lower_bound=float(logit(p_lo[i])),
        threshold=float(lv.threshold[i]),
        predictions=r,
        true_positives=tp,
        precision=tp / r,
        recall=tp / lv.n_members,
        beta=beta,
    )


# --------------------------------------------------------------------------------------
# Main bound
# --------------------------------------------------------------------------------------


def lower_bound(
    scores: object,
    membership: object,
    *,
    beta: float,
    threshold_grid: int | None = None,
    spacing: Spacing = "quantile",
) -> BoundSummary:
    """Lower confidence bound on ``theta`` (``c`` for the baseline, ``c + eps`` for the MIA).

    Parameters
    ----------
    scores
        Membership scores, shape ``(m,)``; higher means "member". Ties are allowed.
    membership
        Game bits ``s``, shape ``(m,)``, 1 = member. Both labels must occur.
    beta
        Level of this one test, in (0, 1). The union bound over thresholds is applied
        inside: ``beta' = beta / thresholds_tried``.
    threshold_grid
        ``None``: every distinct score level is a threshold. ``G``: the top-``j/G`` quantile
        thresholds, ``j = 1..G``, or with ``spacing="geometric"`` the top-``k`` thresholds
        for about ``G`` geometrically spaced counts ``k``.
    spacing
        ``"quantile"`` or ``"geometric"`` (used with ``threshold_grid`` only).

    Returns
    -------
    BoundSummary
        ``lower_bound = max_threshold logit(p_lo)`` with ``p_lo`` the Clopper-Pearson lower
        bound of ``tp / r`` at ``beta'``, and the maximising threshold's counts
        (``predictions = r``, ``true_positives = tp``), precision ``tp / r``, recall
        ``tp / n_members`` and ``beta`` (the level passed in, not ``beta'``).

    Raises
    ------
    ValueError
        Empty input, mismatched lengths, NaN scores, labels other than 0/1, a single label,
        ``beta`` outside (0, 1) or a bad ``threshold_grid``.
    """
    beta = _check_beta(beta)
    t, s = _check_inputs(scores, membership)
    lv = _levels(t, s, threshold_grid, spacing)
    p_lo = clopper_pearson_lower(lv.tp, lv.r, beta / lv.n_tests)
    return _summary(lv, np.asarray(p_lo), beta)


def split_lower_bound(
    val_scores: object,
    val_membership: object,
    scores: object,
    membership: object,
    *,
    beta: float,
) -> BoundSummary:
    """One Clopper-Pearson test at a cut chosen on validation (no union over thresholds).

    On the validation pair every top-``k`` cut is a candidate; its precision is carried to
    the audit set's size (``r = k m / n_val`` predictions at the same precision) and the cut
    whose Clopper-Pearson bound at ``beta`` would then be highest is kept as the fraction
    ``q = k / n_val``. On the audit set the ``ceil(q m)`` highest-scored records (their whole
    tie group) are predicted members and ``tp / r`` gets one Clopper-Pearson bound at
    ``beta``. ``q`` depends on validation data only and the cut on the audit set on its
    scores only, never on its membership bits, so the test has level ``beta`` (see
    docs/two_sided_game.md).
    """
    beta = _check_beta(beta)
    tv, sv = _check_inputs(val_scores, val_membership)
    t, s = _check_inputs(scores, membership)
    lv_val = _levels(tv, sv, None)
    m = t.size
    r_scaled = lv_val.r * (m / tv.size)
    tp_scaled = lv_val.tp / lv_val.r * r_scaled
    p_val = np.asarray(clopper_pearson_lower(tp_scaled, r_scaled, beta))
    q = float(lv_val.r[int(np.argmax(p_val))]) / tv.size
    lv = _levels(t, s, None)
    k = max(1, math.ceil(q * m - 1e-9))
    idx = int(np.searchsorted(lv.r, k, side="left"))  # the tie group that holds rank k
    p_lo = np.zeros(lv.r.size)
    p_lo[idx] = clopper_pearson_lower(int(lv.tp[idx]), int(lv.r[idx]), beta)
    return _summary(lv, p_lo, beta, idx=idx)


def split_ceiling(membership: object, *, beta: float) -> float:
    """The bound a perfect scorer reaches with one test at ``beta``: the cut at
    ``n_members`` (``tp = r = n_members``), ``logit(beta^(1 / n_members))``."""
    beta = _check_beta(beta)
    s = np.asarray(membership)
    _, s_int = _check_inputs(np.arange(s.size, dtype=float), s)
    return float(logit(beta ** (1.0 / int(s_int.sum()))))


def hoeffding_lower_bound(
    scores: object,
    membership: object,
    *,
    beta: float,
    threshold_grid: int | None = None,
) -> BoundSummary:
    """The same test with Hoeffding's tail bound (the paper's Equation (1)).

    ``p_lo = max(0, tp / r - sqrt(log(1 / beta') / (2 r)))`` at each threshold, same
    thresholds and ``beta'`` as :func:`lower_bound`. Every ``p`` it rejects is rejected by
    the exact binomial tail too, so it never exceeds :func:`lower_bound`; it is here for
    reference (it is the formula the paper prints for readability).
    """
    beta = _check_beta(beta)
    t, s = _check_inputs(scores, membership)
    lv = _levels(t, s, threshold_grid)
    level = beta / lv.n_tests
    p_lo = np.maximum(0.0, lv.tp / lv.r - np.sqrt(np.log(1.0 / level) / (2.0 * lv.r)))
    return _summary(lv, p_lo, beta)


def ceiling(
    membership: object,
    *,
    beta: float,
    threshold_grid: int | None = None,
    spacing: Spacing = "quantile",
) -> float:
    """The bound a perfect scorer reaches on this audit set, with the same union bound.

    A perfect scorer ranks all members first with distinct scores (as a continuous
    classifier does), so there are ``m`` levels and ``beta' = beta / m`` (or
    ``beta / threshold_grid``). At the top-``k`` threshold with ``k <= n_members``,
    ``tp = r = k`` and ``p_lo = beta'^(1/k)``, increasing in ``k``; so the ceiling is
    ``logit(beta'^(1 / n_members))`` (with a grid: the largest grid rank ``<= n_members``).

    Note: a scorer that puts all members on one tied level and all non-members on another
    has only two thresholds and could exceed this value; the ceiling describes scorers with
    (nearly) distinct scores, which is what the audit's classifiers produce.
    """
    beta = _check_beta(beta)
    s = np.asarray(membership)
    # Distinct scores, members strictly above non-members: the perfect ranking itself. Its
    # validation is lower_bound's, so the two never disagree on conventions.
    perfect = np.arange(s.size, dtype=float) + s.size * np.asarray(s, dtype=float)
    t, s_int = _check_inputs(perfect, s)
    if threshold_grid is None:
        # Every rank k = 1..m is a level: the best is k = n_members (closed form, O(m)).
        level = beta / t.size
        return float(logit(level ** (1.0 / int(s_int.sum()))))
    # With a grid the best rank may lie just above n_members: evaluate the grid.
    return lower_bound(
        t, s_int, beta=beta, threshold_grid=threshold_grid, spacing=spacing
    ).lower_bound


def bound_curve(
    scores: object,
    membership: object,
    *,
    beta: float,
    recall_grid: object,
    threshold_grid: int | None = None,
    spacing: Spacing = "quantile",
) -> Curve:
    """Precision and bound at each recall level of ``recall_grid``.

    Each point is the first threshold (from the highest score down) whose recall
    ``tp / n_members`` reaches the grid value. The bound there uses the same ``beta'`` as
    :func:`lower_bound` (``beta / thresholds_tried``), so the curve's maximum equals the
    lower bound restricted to those thresholds and never exceeds :func:`lower_bound`.
    ``Curve.recall`` holds the grid values (so curves of several repeats share a grid).
    """
    beta = _check_beta(beta)
    t, s = _check_inputs(scores, membership)
    grid = np.asarray(recall_grid, dtype=float).ravel()
    if grid.size == 0 or np.isnan(grid).any() or (grid < 0).any() or (grid > 1).any():
        raise ValueError("recall_grid must be a non-empty list of values in [0, 1]")
    lv = _levels(t, s, threshold_grid, spacing)
    recall = lv.tp / lv.n_members
    # recall is non-decreasing along the levels and reaches 1 at the last one; a tiny
    # slack absorbs floating error in grid values such as 0.1 * 3.
    idx = np.searchsorted(recall, grid - 1e-12, side="left")
    idx = np.minimum(idx, recall.size - 1)
    p_lo = np.asarray(clopper_pearson_lower(lv.tp[idx], lv.r[idx], beta / lv.n_tests))
    return Curve(
        recall=[float(x) for x in grid],
        precision=[float(x) for x in lv.tp[idx] / lv.r[idx]],
        bound=[float(x) for x in np.atleast_1d(logit(p_lo))],
    )


# --------------------------------------------------------------------------------------
# Appendix E relaxations
# --------------------------------------------------------------------------------------


def _worst_case_tail(tp: int, r: int, p: float, mu: float) -> float:
    """``sup_F P[F + Binomial(r, p) >= tp]`` over ``F`` independent, on {0..m}, ``E[F] <= mu``.

    With ``g(f) = P[Binomial(r, p) >= tp - f]`` (non-decreasing, 1 from ``f = tp`` on), the
    supremum of ``E[g(F)]`` under the mean constraint is the upper concave envelope of ``g``
    evaluated at ``mu``: the best mix of two support points ``a <= mu <= b``. This is the
    linear program the paper points to (Steinke et al. 2023, Theorem 5.2) solved exactly.
    """
    if mu >= tp:
        return 1.0
    f = np.arange(tp + 1)
    g = scipy.stats.binom.sf(tp - f - 1, r, p)
    if mu <= 0:
        return float(g[0])
    lo = int(math.floor(mu))
    a = f[: lo + 1, None]
    b = f[None, lo + 1 :]
    mix = ((b - mu) * g[: lo + 1, None] + (mu - a) * g[None, lo + 1 :]) / (b - a)
    return float(mix.max())


def _relaxed_p_lo(tp: int, r: int, level: float, mu: float, p_hi: float) -> float:
    """Largest ``p`` whose worst-case tail (see ``_worst_case_tail``) is ``<= level``."""
    if tp == 0 or _worst_case_tail(tp, r, 0.0, mu) > level:
        return 0.0
    # The tail grows with p and at the Clopper-Pearson boundary p_hi it is >= level (F = 0
    # is one of the admissible F), so the root lies in [0, p_hi].
    if _worst_case_tail(tp, r, p_hi, mu) <= level:
        return p_hi
    return float(
        scipy.optimize.brentq(
            lambda p: _worst_case_tail(tp, r, p, mu) - level, 0.0, p_hi, xtol=1e-13, rtol=1e-12
        )
    )


def _relaxed(
    scores: object,
    membership: object,
    *,
    beta: float,
    failure_fraction: float,
    threshold_grid: int | None,
) -> BoundSummary:
    beta = _check_beta(beta)
    t, s = _check_inputs(scores, membership)
    lv = _levels(t, s, threshold_grid)
    level = beta / lv.n_tests
    mu = 2.0 * t.size * failure_fraction
    p_cp = np.asarray(clopper_pearson_lower(lv.tp, lv.r, level))
    if mu == 0.0:
        return _summary(lv, p_cp, beta)
    # The relaxed bound never exceeds the Clopper-Pearson one at the same threshold, so
    # visit thresholds by decreasing p_cp and stop once p_cp cannot beat the best so far.
    p_rel = np.zeros_like(p_cp)
    best = -1.0
    for i in np.argsort(-p_cp, kind="stable"):
        if p_cp[i] <= best:
            break
        p_rel[i] = _relaxed_p_lo(int(lv.tp[i]), int(lv.r[i]), level, mu, float(p_cp[i]))
        best = max(best, p_rel[i])
    return _summary(lv, p_rel, beta)


def closeness_relaxed_lower_bound(
    scores: object,
    membership: object,
    *,
    beta: float,
    gamma: float,
    threshold_grid: int | None = None,
) -> BoundSummary:
    """Bound under (c, gamma)-closeness of the generator, pure DP (Appendix E.1, Prop. 3).

    Under (c, gamma)-closeness (``P_D[x] <= e^c P_G[x] + gamma``), Proposition 3 bounds
    ``tp`` by ``F + Binomial(r, sigmoid(theta))`` with ``F`` independent, supported on
    ``{0..m}`` and ``E[F] <= 2 m gamma``; this holds for both the baseline
    (``theta = c``) and the MIA with an eps-DP model (``theta = c + eps``). ``p`` is
    rejected when ``sup_F P[F + Binomial(r, p) >= tp] <= beta'``; the supremum over such
    ``F`` is computed exactly (upper concave envelope of the shifted binomial tail at
    ``2 m gamma``). Same thresholds and ``beta'`` as :func:`lower_bound`; ``gamma = 0``
    gives :func:`lower_bound` exactly. ``m`` is the audit set size ``len(scores)``.
    """
    gamma = float(gamma)
    if not (0.0 <= gamma <= 1.0):
        raise ValueError(f"gamma must lie in [0, 1], got {gamma!r}")
    return _relaxed(
        scores, membership, beta=beta, failure_fraction=gamma, threshold_grid=threshold_grid
    )


def approx_dp_lower_bound(
    scores: object,
    membership: object,
    *,
    beta: float,
    gamma: float,
    delta: float,
    threshold_grid: int | None = None,
) -> BoundSummary:
    """MIA bound on ``c + eps`` for an (eps, delta)-DP model, (c, gamma)-close generator.

    Appendix E.2, Proposition 4: ``tp`` of the MIA is dominated by
    ``F + Binomial(r, sigmoid(c + eps))`` with ``E[F] <= 2 m (gamma + delta - gamma delta)``
    (the failure events of the generator and of the DP mechanism combined). The baseline's
    test is unchanged by delta: use :func:`closeness_relaxed_lower_bound` for ``c``. (The
    statement of Proposition 4 prints ``2 m delta`` for the baseline; its proof says the
    baseline test follows Proposition 3, i.e. ``2 m gamma``.)
    """
    gamma, delta = float(gamma), float(delta)
    if not (0.0 <= gamma <= 1.0):
        raise ValueError(f"gamma must lie in [0, 1], got {gamma!r}")
    if not (0.0 <= delta <= 1.0):
        raise ValueError(f"delta must lie in [0, 1], got {delta!r}")
    return _relaxed(
        scores,
        membership,
        beta=beta,
        failure_fraction=gamma + delta - gamma * delta,
        threshold_grid=threshold_grid,
    )
