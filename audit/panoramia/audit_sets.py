"""Records with the features each classifier sees, and the classifier inputs built from them.

b sees every record through h, the MIA through f (plus h as a difficulty reference); both
get the reference models' calibrated statistics of their own view. Nothing else differs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from panoramia_fl.audit.panoramia.components import ClassifierData, Records
from panoramia_fl.audit.panoramia.game import PrivacyGame

View = Literal["h", "f"]
"""Whose outputs a classifier sees: the helper h (baseline b) or the target f (MIA)."""


@dataclass(frozen=True)
class FeatureSet:
    """Records of one kind (members, generated or real non-members) with h / f features and,
    with reference models, each view's calibrated statistics."""

    records: Records
    f: np.ndarray
    h: np.ndarray
    calibrated_f: np.ndarray | None = None
    calibrated_h: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.records)

    def take(self, idx: np.ndarray) -> FeatureSet:
        def pick(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[idx]

        return FeatureSet(
            self.records.take(idx),
            self.f[idx],
            self.h[idx],
            pick(self.calibrated_f),
            pick(self.calibrated_h),
        )

    def features(self, view: View) -> np.ndarray:
        return self.f if view == "f" else self.h

    def calibrated(self, view: View) -> np.ndarray | None:
        return self.calibrated_f if view == "f" else self.calibrated_h


def _stack(a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    return None if a is None or b is None else np.concatenate([a, b])


def classifier_data(
    members: FeatureSet, others: FeatureSet, *, view: View, reference: bool
) -> ClassifierData:
    """Members (label 1) and non-members (label 0) seen through h (b) or f (the MIA)."""
    membership = np.concatenate([np.ones(len(members)), np.zeros(len(others))])
    return ClassifierData(
        Records.concat([members.records, others.records]),
        np.concatenate([members.features(view), others.features(view)]),
        membership.astype(np.int64),
        np.concatenate([members.h, others.h]) if reference else None,
        _stack(members.calibrated(view), others.calibrated(view)),
    )


def game_data(
    game: PrivacyGame, members: FeatureSet, others: FeatureSet, *, view: View, reference: bool
) -> ClassifierData:
    """The audit set X of ``game`` seen through h or f (the same records for b and the MIA)."""
    cal_m, cal_o = members.calibrated(view), others.calibrated(view)
    return ClassifierData(
        game.records(members.records, others.records),
        game.pick(members.features(view), others.features(view)),
        game.membership.copy(),
        game.pick(members.h, others.h) if reference else None,
        None if cal_m is None or cal_o is None else game.pick(cal_m, cal_o),
    )
