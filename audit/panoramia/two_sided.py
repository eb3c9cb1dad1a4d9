"""The two-sided game in one repeat: each side's bounds, and the game's reading.

Its member side asks what the paper's game asks (confident "member" guesses), its
non-member side the mirror question (confident "non-member" guesses), each side's b and
MIA selected on validation by that side's bound, every bound at the two-sided level
(:attr:`~audit.config.AuditConfig.two_sided_level`). The game reads the larger side
(docs/two_sided_game.md); :mod:`audit.panoramia.sides` orients the data for either side.
"""

from __future__ import annotations

import numpy as np

from panoramia_fl.audit.panoramia.comparisons import RmRnOutcome, clip
from panoramia_fl.audit.panoramia.sides import SIDES, BoundRule, Scored, Side
from panoramia_fl.audit.result import SideRepeat, TwoSidedRepeat

ScoredGame = dict[tuple[str, Side], Scored]
"""The game's scores of b (``"baseline"``) and the MIA (``"mia"``), per side."""


def side_repeat(
    scored: ScoredGame,
    membership: np.ndarray,
    side: Side,
    rule: BoundRule,
    rm_rn: tuple[float, float] | None,
) -> SideRepeat:
    """One game's c_lb, {c+eps}_lb, eps_tilde and ceiling under ``rule`` (the paper's game:
    the member side at the one-sided level), beside RM;RN's bound and ceiling on that side
    (None without real non-members)."""
    b = rule.bound(scored["baseline", side], membership, side)
    a = rule.bound(scored["mia", side], membership, side)
    c_lb, c_eps_lb = clip(b.lower_bound), clip(a.lower_bound)
    return SideRepeat(
        c_lb=c_lb,
        c_eps_lb=c_eps_lb,
        eps_tilde=max(0.0, c_eps_lb - c_lb),
        ceiling=rule.ceiling(membership, side),
        baseline=b,
        mia=a,
        rm_rn_eps_lb=None if rm_rn is None else rm_rn[0],
        rm_rn_ceiling=None if rm_rn is None else rm_rn[1],
    )


def two_sided_repeat(
    scored: ScoredGame,
    membership: np.ndarray,
    rule: BoundRule,
    comparison: RmRnOutcome | None,
    *,
    selected: dict[str, object],
) -> TwoSidedRepeat:
    """Both sides of one repeat's game and its reading, the larger side's eps_tilde;
    ``selected``: the non-member side's choices of b and the MIA."""
    sides = {
        side: side_repeat(
            scored,
            membership,
            side,
            rule,
            None
            if comparison is None
            else (comparison.side_eps_lb[side], comparison.side_ceiling[side]),
        )
        for side in SIDES
    }
    return TwoSidedRepeat(
        beta=rule.beta,
        member=sides["member"],
        nonmember=sides["nonmember"],
        eps_tilde=max(x.eps_tilde for x in sides.values()),
        rm_rn_eps_lb=None if comparison is None else max(comparison.side_eps_lb.values()),
        selected=selected,
    )
