"""Leakage over training rounds: one line per audited global checkpoint.

Every checkpoint of a site is audited with the same generated non-members, helper,
reference models and games (:func:`audit.panoramia.pipeline.run_audits_of`), so the lines
differ only in the target f. The first round whose two-sided interval excludes 0 is when the audit
first sees leakage: a bound on how many rounds the consortium can train before it shows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from panoramia_fl.audit.result import Interval, PanoramiaResult


@dataclass(frozen=True)
class RoundLeakage:
    """What the audit of one round's global model says, in brief."""

    round: int
    eps_tilde_two_sided: Interval
    """Two-sided eps_tilde over repeats (mean and 95% t-interval)."""
    side: str
    """The side (``member`` / ``nonmember``) whose eps_tilde is larger."""
    o1_eps_lb: Interval | None
    """O(1) on the site's real non-members; None without them."""
    mia_auc: float
    tpr_at_1pct_fpr: float
    tpr_at_01pct_fpr: float
    global_accuracy: float | None = None
    """The global model's accuracy that round, from the server's round log."""
    rm_rn_eps_lb: Interval | None = None
    """Two-sided RM;RN on the site's real non-members; None without them (and in files
    written before it was kept)."""
    dp_epsilon: float | None = None
    """The site's record-level epsilon after this round (its accountant), which covers the
    audit of its own update of the round (``audit.updates``); None otherwise."""

    @property
    def excludes_zero(self) -> bool:
        """The two-sided interval lies above 0: leakage is seen at this round."""
        return self.eps_tilde_two_sided.low > 0

    def with_accuracy(self, accuracy: float | None) -> RoundLeakage:
        return dataclasses.replace(self, global_accuracy=accuracy)


def round_leakage(result: PanoramiaResult, server_round: int) -> RoundLeakage:
    """The brief line of ``result``, the audit of round ``server_round``'s model."""
    if result.two_sided is None:
        raise ValueError("round_leakage needs an audit with the two-sided game")
    mia = result.roc["mia"]
    return RoundLeakage(
        round=server_round,
        eps_tilde_two_sided=result.two_sided.eps_tilde,
        side=result.two_sided.side,
        o1_eps_lb=result.o1_eps_lb,
        rm_rn_eps_lb=result.two_sided.rm_rn_eps_lb,
        mia_auc=mia.auc,
        tpr_at_1pct_fpr=mia.tpr_at_fpr["0.01"],
        tpr_at_01pct_fpr=mia.tpr_at_fpr["0.001"],
    )


def first_leaking_round(entries: Iterable[RoundLeakage]) -> int | None:
    """The first audited round whose two-sided interval excludes 0; None if none does."""
    leaking = [e.round for e in entries if e.excludes_zero]
    return min(leaking) if leaking else None
