"""Score-only attacks (``classifier.design = "score"``): no classifier is trained.

For one scalar statistic per record a trained classifier only learns the statistic's
direction, and it costs the members it trains on. Here b scores a record by a statistic of
the helper h, the MIA by the same statistic of the target f, and the side fixes the
direction: the member side guesses "member" for high log-likelihood (low loss), the
non-member side guesses "non-member" for low log-likelihood (high loss). So every member
outside D_G plays in the game.

Candidate statistics (each view's own model; the reference models calibrate both views the
same way, so b gets every non-f input the MIA gets): ``log_p`` (raw), ``lira_offline`` and
``rmia_offline`` (:mod:`audit.panoramia.calibration`). Which one counts is chosen without looking at
the game's coins:

* ``threshold_selection = "union"``: every candidate is bounded on the game at ``beta / k``
  with the union over all its thresholds, and the largest bound is kept (a union bound over
  the ``k`` candidates);
* ``threshold_selection = "split"``: a validation slice chooses the statistic (by its
  validation bound) and the threshold, then one Clopper-Pearson test runs on the game.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from panoramia_fl.audit.panoramia.audit_sets import FeatureSet, View
from panoramia_fl.audit.panoramia.calibration import log_likelihood
from panoramia_fl.audit.panoramia.game import PrivacyGame
from panoramia_fl.audit.panoramia.sides import BoundRule, Scored, Side, break_ties
from panoramia_fl.audit.result import BoundSummary

RAW = "log_p"
CALIBRATED = ("lira_offline", "rmia_offline")
"""Columns 0 and 1 of :func:`audit.panoramia.calibration.calibrated_statistics`."""


def statistics(features: FeatureSet, view: View) -> dict[str, np.ndarray]:
    """The view's candidate statistics per record, higher = more member-like."""
    out = {RAW: log_likelihood(features.features(view), features.records.y)}
    cal = features.calibrated(view)
    if cal is not None:
        out.update({name: cal[:, k] for k, name in enumerate(CALIBRATED)})
    return out


def candidate_count(features: FeatureSet) -> int:
    """How many statistics a view offers (the union bound's ``k`` under ``"union"``)."""
    return 1 + (len(CALIBRATED) if features.calibrated_f is not None else 0)


@dataclass(frozen=True)
class Candidates:
    """Each statistic scored on the game's shown records and on a validation slice."""

    game: dict[str, np.ndarray]
    val: dict[str, np.ndarray]
    val_membership: np.ndarray

    @classmethod
    def of(
        cls,
        game: PrivacyGame,
        members: FeatureSet,
        others: FeatureSet,
        val_members: FeatureSet,
        val_others: FeatureSet,
        *,
        view: View,
        seed: int,
    ) -> Candidates:
        shown_m, shown_o = statistics(members, view), statistics(others, view)
        val_m, val_o = statistics(val_members, view), statistics(val_others, view)
        return cls(
            {k: break_ties(game.pick(shown_m[k], shown_o[k]), seed=seed) for k in shown_m},
            {k: break_ties(np.concatenate([val_m[k], val_o[k]]), seed=seed) for k in val_m},
            np.concatenate([np.ones(len(val_members)), np.zeros(len(val_others))]).astype(np.int64),
        )

    def scored(self, name: str) -> Scored:
        return Scored(self.game[name], self.val[name], self.val_membership)

    def choose(self, membership: np.ndarray, side: Side, rule: BoundRule) -> tuple[str, Scored]:
        """The statistic that counts for ``side`` under ``rule`` (see the module docstring).

        Under ``"union"`` ``rule.beta`` must already be divided by the number of candidates.
        """
        if rule.selection == "split":
            select = rule.selection_score(side)
            name = max(self.val, key=lambda k: select(self.val[k], self.val_membership))
            return name, self.scored(name)
        best: tuple[float, str] | None = None
        for name in self.game:
            summary: BoundSummary = rule.bound(self.scored(name), membership, side)
            if best is None or summary.lower_bound > best[0]:
                best = (summary.lower_bound, name)
        assert best is not None
        return best[1], self.scored(best[1])
