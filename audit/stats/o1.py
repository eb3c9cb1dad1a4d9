"""O(1) black-box lower bound on eps (Steinke, Nasr and Jagielski, 2023), delta = 0.

Comparison measurement for simulations that hold real non-members. Given scores of real
members and real non-members (higher = member), a pair of thresholds ``t_hi >= t_lo`` makes
guesses with abstention:

* "member" for ``score >= t_hi``,
* "non-member" for ``score < t_lo``,
* no guess in between.

``guesses`` is the number of guesses and ``correct`` the number of right ones. In Steinke
et al. each candidate's inclusion is a fair coin and, for an eps-DP training run (delta = 0),
the number of correct guesses is dominated by ``Binomial(guesses, sigmoid(eps))``. The
audit (:func:`audit.panoramia.comparisons.o1_eps_lb`) plays the same coins after training:
slot ``i`` shows real member ``i`` or real non-member ``i`` by an independent fair coin, so each
shown record is a member with probability 1/2, as in the privacy game. The largest eps
rejected is ``logit(p_lo)``, ``p_lo`` the one-sided Clopper-Pearson lower bound of
``correct / guesses`` at ``beta'``; the bound is clipped at 0 (eps >= 0).

Threshold pairs tried (fixed by the number of records ``n`` only, before looking at the
labels): ``k_plus`` in a grid of counts and ``k_minus`` in the same grid, where the grid is
0 plus about ``grid_size - 1`` geometrically spaced counts from 1 to ``n`` (rounded,
duplicates dropped). ``t_hi`` is the ``k_plus``-th highest score (its whole tie group
guesses "member"); the ``k_minus`` lowest scores (with their tie group) guess "non-member",
so ``t_lo`` is the next distinct score above them. Pairs whose two sides overlap are skipped,
as is ``(0, 0)``, but every grid pair except ``(0, 0)`` counts in the union bound:
``beta' = beta / n_pairs_tried`` (at most ``grid_size**2 - 1``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from panoramia_fl.audit.stats.bounds import (
    _check_beta,
    _check_inputs,
    clopper_pearson_lower,
    geometric_counts,
    logit,
)

__all__ = ["GuessPairs", "O1Summary", "count_grid", "guess_pairs", "o1_lower_bound"]


@dataclass(frozen=True)
class O1Summary:
    """The maximising threshold pair of the O(1) bound."""

    lower_bound: float
    """max(0, logit of the Clopper-Pearson lower bound of correct / guesses at beta')."""
    threshold_low: float
    """Guess "non-member" for score < threshold_low (-inf: no non-member guesses)."""
    threshold_high: float
    """Guess "member" for score >= threshold_high (+inf: no member guesses)."""
    guesses: int
    correct: int
    beta: float
    """The level passed in; the union bound uses beta / n_pairs_tried."""
    n_pairs_tried: int
    member_guesses: int = 0
    nonmember_guesses: int = 0


def count_grid(n: int, grid_size: int = 20) -> np.ndarray:
    """0 plus about ``grid_size - 1`` geometrically spaced counts in ``[1, n]``."""
    if grid_size < 2:
        raise ValueError(f"grid_size must be at least 2, got {grid_size!r}")
    return np.concatenate(([0], geometric_counts(n, grid_size - 1)))


@dataclass(frozen=True)
class GuessPairs:
    """Guesses and correct guesses of every threshold pair ``(k_plus[i], k_minus[j])``.

    Row ``i`` guesses "member" for the ``k_plus[i]`` highest scores (their whole tie group),
    column ``j`` "non-member" for the ``k_minus[j]`` lowest (likewise). ``valid`` drops pairs
    whose two sides overlap and pairs without a guess; the bounds maximise over valid pairs.
    """

    sorted_scores: np.ndarray
    """The scores in ascending order (thresholds are read from them)."""
    plus_value: np.ndarray
    """Lowest score guessed "member" per row (+inf: none)."""
    plus_guesses: np.ndarray
    minus_end: np.ndarray
    """Per column, how many of the lowest scores guess "non-member" (ties included)."""
    guesses: np.ndarray
    correct: np.ndarray
    valid: np.ndarray

    @property
    def n(self) -> int:
        """Records (the one-run audit's m: abstentions count too)."""
        return int(self.sorted_scores.size)

    def thresholds(self, i: int, j: int) -> tuple[float, float]:
        """``(threshold_low, threshold_high)`` of pair ``(i, j)``: guess "non-member" below
        the low one, "member" at or above the high one."""
        n, end = self.n, int(self.minus_end[j])
        # threshold_low: the next distinct level above the non-member side ("score < t_lo").
        low = float(self.sorted_scores[end]) if 0 < end < n else (np.inf if end else -np.inf)
        return low, float(self.plus_value[i])


def guess_pairs(
    t: np.ndarray, s: np.ndarray, k_plus: np.ndarray, k_minus: np.ndarray
) -> GuessPairs:
    """Counts of every pair of ``k_plus`` x ``k_minus`` on checked scores ``t`` and 0/1
    labels ``s`` (see :class:`GuessPairs`)."""
    n = t.size
    order = np.argsort(t, kind="stable")
    asc = t[order]
    s_asc = s[order]
    # Prefix sums: members / non-members among the i lowest scores.
    mem_below = np.concatenate(([0], np.cumsum(s_asc)))
    non_below = np.concatenate(([0], np.cumsum(1 - s_asc)))
    n_mem = int(mem_below[-1])
    kp, km = np.asarray(k_plus), np.asarray(k_minus)
    # Member side: everything >= the kp-th highest score.
    v_hi = np.where(kp > 0, asc[np.clip(n - kp, 0, n - 1)], np.inf)
    start_hi = np.where(kp > 0, np.searchsorted(asc, v_hi, side="left"), n)
    plus_guesses = n - start_hi
    plus_correct = n_mem - mem_below[start_hi]
    # Non-member side: everything <= the km-th lowest score.
    v_lo = np.where(km > 0, asc[np.clip(km - 1, 0, n - 1)], -np.inf)
    end_lo = np.where(km > 0, np.searchsorted(asc, v_lo, side="right"), 0)
    minus_correct = non_below[end_lo]
    guesses = plus_guesses[:, None] + end_lo[None, :]
    return GuessPairs(
        sorted_scores=asc,
        plus_value=v_hi,
        plus_guesses=plus_guesses,
        minus_end=end_lo,
        guesses=guesses,
        correct=plus_correct[:, None] + minus_correct[None, :],
        valid=(end_lo[None, :] <= start_hi[:, None]) & (guesses > 0),
    )


def o1_lower_bound(
    scores: object,
    membership: object,
    *,
    beta: float,
    grid_size: int = 20,
) -> O1Summary:
    """O(1) lower bound on eps from member / non-member scores with abstention.

    Parameters
    ----------
    scores
        Scores of real members and real non-members, shape ``(n,)``; higher = member.
    membership
        1 = member, 0 = non-member; both must occur.
    beta
        Level of the test in (0, 1); the union bound over the threshold pairs is inside.
    grid_size
        Number of counts per side (0 included); pairs tried ``<= grid_size**2 - 1``.

    Returns
    -------
    O1Summary
        See the module docstring for the test and the pairs tried.
    """
    beta = _check_beta(beta)
    t, s = _check_inputs(scores, membership)
    counts = count_grid(t.size, grid_size)
    n_pairs = counts.size**2 - 1
    pairs = guess_pairs(t, s, counts, counts)
    valid, guesses, correct = pairs.valid, pairs.guesses, pairs.correct
    p_lo = np.zeros(guesses.shape)
    p_lo[valid] = clopper_pearson_lower(correct[valid], guesses[valid], beta / n_pairs)
    i, j = np.unravel_index(int(np.argmax(np.where(valid, p_lo, -1.0))), p_lo.shape)
    t_low, t_high = pairs.thresholds(int(i), int(j))
    return O1Summary(
        lower_bound=max(0.0, float(logit(p_lo[i, j]))),
        threshold_low=t_low,
        threshold_high=t_high,
        guesses=int(guesses[i, j]),
        correct=int(correct[i, j]),
        beta=beta,
        n_pairs_tried=int(n_pairs),
        member_guesses=int(pairs.plus_guesses[i]),
        nonmember_guesses=int(pairs.minus_end[j]),
    )
