"""The two sides of the privacy game: "member" guesses and "non-member" guesses.

Definition 3 bounds generated records from below (``P_G >= e^-c P_D``): a confident
"member" guess is evidence against H. Its mirror (``P_D >= e^-c' P_G``) makes confident
"non-member" guesses testable with the same code: flip the membership bits and negate the
scores (docs/two_sided_game.md). Every function here takes a ``side`` and orients the data
before handing it to :mod:`audit.stats.bounds`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from panoramia_fl.audit.result import BoundSummary
from panoramia_fl.audit.stats import bounds

Side = Literal["member", "nonmember"]
SIDES: tuple[Side, Side] = ("member", "nonmember")

ThresholdSelection = Literal["union", "split"]


def oriented(
    scores: np.ndarray, membership: np.ndarray, side: Side
) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, membership)`` for member guesses, ``(-scores, 1 - membership)`` otherwise."""
    t = np.asarray(scores, dtype=np.float64)
    s = np.asarray(membership).astype(np.int64)
    if side == "member":
        return t, s
    if side == "nonmember":
        return -t, 1 - s
    raise ValueError(f"side must be 'member' or 'nonmember', got {side!r}")


@dataclass(frozen=True)
class Scored:
    """A fitted classifier's scores on the audit set and on its own validation split."""

    scores: np.ndarray
    val_scores: np.ndarray
    val_membership: np.ndarray


@dataclass(frozen=True)
class BoundRule:
    """How a score vector becomes a bound: level, threshold selection and grid."""

    beta: float
    selection: ThresholdSelection = "union"
    threshold_grid: int | None = None
    spacing: bounds.Spacing = "quantile"

    def bound(self, scored: Scored, membership: np.ndarray, side: Side) -> BoundSummary:
        """The side's lower bound on theta (c, c', c + eps or c' + eps)."""
        t, s = oriented(scored.scores, membership, side)
        if self.selection == "split":
            tv, sv = oriented(scored.val_scores, scored.val_membership, side)
            return bounds.split_lower_bound(tv, sv, t, s, beta=self.beta)
        return bounds.lower_bound(
            t, s, beta=self.beta, threshold_grid=self.threshold_grid, spacing=self.spacing
        )

    def ceiling(self, membership: np.ndarray, side: Side) -> float:
        """The bound a perfect scorer reaches on this side of the audit set."""
        _, s = oriented(np.zeros(len(membership)), membership, side)
        if self.selection == "split":
            return bounds.split_ceiling(s, beta=self.beta)
        return bounds.ceiling(
            s, beta=self.beta, threshold_grid=self.threshold_grid, spacing=self.spacing
        )

    def selection_score(self, side: Side) -> Callable[[np.ndarray, np.ndarray], float]:
        """``select_by`` for a classifier: the side's union bound on validation data.

        Ties are broken first, as on the game's test split: otherwise a coarse statistic
        (e.g. correctness, two levels) pays a two-threshold union on validation but an
        m-threshold one on the test, and selection favours it for that alone.
        """

        def score(t: np.ndarray, s: np.ndarray) -> float:
            ts, ss = oriented(break_ties(t, seed=0), s, side)
            return bounds.lower_bound(
                ts, ss, beta=self.beta, threshold_grid=self.threshold_grid, spacing=self.spacing
            ).lower_bound

        return score


def break_ties(scores: np.ndarray, *, seed: int) -> np.ndarray:
    """Scores with ties broken at random, order between distinct values kept.

    A randomised scorer is allowed by Propositions 1-2. Tied scores would shrink the union
    bound (fewer distinct thresholds) and let a two-level scorer exceed the ceiling, which is
    defined for distinct scores; breaking ties keeps ``bound <= ceiling`` on every audit set,
    on both sides (negating distinct scores keeps them distinct).
    """
    t = np.asarray(scores, dtype=np.float64)
    levels = np.unique(t)
    if levels.size == t.size:
        return t
    gap = float(np.diff(levels).min()) if levels.size > 1 else 1.0
    jitter = np.random.default_rng([seed, 0x7E]).random(t.size) * (gap / 2)
    out = t + jitter
    if np.unique(out).size == t.size:
        return out
    # Gaps below float resolution: fall back to ranks (bounds depend on the order only).
    order = np.lexsort((jitter, t))
    ranks = np.empty(t.size)
    ranks[order] = np.arange(t.size, dtype=np.float64)
    return ranks
