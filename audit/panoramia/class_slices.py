"""The two-sided game inside each label: which of a site's patient groups is exposed.

With label pairing (:mod:`audit.panoramia.pairing`) slot ``i`` shows either member ``i`` or a
non-member of the same label, so the slots of label ``y`` form a game of their own whose
coins are as independent as the whole game's. Inside it the same b and MIA scores (chosen
on the whole game, or on validation) give the four two-sided bounds and the MIA's TPR at 1%
FPR. Each class's bounds run at the two-sided level divided by the number of labels L
(Bonferroni): every class's claim holds at once, so the most exposed class is a valid claim
at the audit's beta.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from panoramia_fl.audit.panoramia.sides import SIDES, BoundRule, Scored, Side
from panoramia_fl.audit.result import ClassSlice, ClassSliceResult, Interval
from panoramia_fl.audit.stats.roc import roc_summary

MIN_CLASS_CEILING = 1.0
"""A class whose slots let even a perfect attack reach no more than this bound (at the
class's level) is flagged as having too few records: its eps_tilde can only read ~0."""


def _restrict(scored: Scored, mask: np.ndarray) -> Scored:
    """The class's game slots; validation stays whole (it only places a cut)."""
    return Scored(scored.scores[mask], scored.val_scores, scored.val_membership)


def class_slices(
    scored: dict[tuple[str, Side], Scored],
    membership: np.ndarray,
    labels: np.ndarray,
    rule: BoundRule,
) -> list[ClassSlice]:
    """One repeat's slices: ``scored`` holds ``(baseline|mia, side)`` scores of the game's
    slots, ``labels`` each slot's label, ``rule`` the two-sided rule (its level is divided
    by the number of labels)."""
    classes = np.unique(labels)
    level_rule = replace(rule, beta=rule.beta / len(classes))
    slices = []
    for label in classes:
        mask = labels == label
        s = membership[mask]
        if not 0 < int(s.sum()) < len(s):
            # Every coin of the class fell one way: no test, and nothing a bound could say.
            slices.append(ClassSlice(int(label), int(mask.sum()), 0.0, None, 0.0, level_rule.beta))
            continue
        eps = 0.0
        for side in SIDES:
            b = level_rule.bound(_restrict(scored["baseline", side], mask), s, side)
            a = level_rule.bound(_restrict(scored["mia", side], mask), s, side)
            eps = max(eps, max(0.0, a.lower_bound) - max(0.0, b.lower_bound))
        slices.append(
            ClassSlice(
                label=int(label),
                slots=int(mask.sum()),
                eps_tilde=float(eps),
                tpr_at_1pct_fpr=roc_summary(scored["mia", "member"].scores[mask], s).tpr_at_fpr[
                    "0.01"
                ],
                ceiling=level_rule.ceiling(s, "member"),
                level=level_rule.beta,
            )
        )
    return slices


def aggregate_slices(per_repeat: list[list[ClassSlice]]) -> list[ClassSliceResult]:
    """Each label's slices over the repeats that saw it."""
    by_label: dict[int, list[ClassSlice]] = {}
    for slices in per_repeat:
        for one in slices:
            by_label.setdefault(one.label, []).append(one)
    out = []
    for label, seen in sorted(by_label.items()):
        tprs = [x.tpr_at_1pct_fpr for x in seen if x.tpr_at_1pct_fpr is not None]
        out.append(
            ClassSliceResult(
                label=label,
                slots=min(x.slots for x in seen),
                eps_tilde=Interval.of([x.eps_tilde for x in seen]),
                tpr_at_1pct_fpr=Interval.of(tprs) if tprs else None,
                level=max(x.level for x in seen),
                too_few=any(x.ceiling <= MIN_CLASS_CEILING for x in seen),
            )
        )
    return out
