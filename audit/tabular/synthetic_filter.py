"""Real-vs-synthetic filter (paper, Appendix C.3).

A classifier learns to tell D_G (real, already spent on the generator and never part of the
game) from extra synthetic rows that are not used anywhere else. Synthetic rows it then
calls synthetic with probability at least ``confidence`` are dropped before they reach the
audit, so that the baseline has to work on plausible rows rather than on obvious artefacts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.metrics import roc_auc_score
from threadpoolctl import threadpool_limits


def _threads() -> int:
    # Boosting uses OpenMP; follow torch's thread setting (1 per site in the harness).
    return max(1, torch.get_num_threads())


def _features(x: np.ndarray, y: np.ndarray | None) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x if y is None else np.hstack([x, np.asarray(y, dtype=np.float32)[:, None]])


@dataclass
class SyntheticFilter:
    """Gradient-boosted real-vs-synthetic classifier with a drop threshold.

    Parameters
    ----------
    confidence
        Drop a synthetic row when P(synthetic | row) >= confidence.
    holdout
        Fraction of the filter's training rows kept aside to report its AUC.
    """

    confidence: float = 0.95
    holdout: float = 0.25
    model: HistGradientBoostingClassifier | None = field(default=None, repr=False)

    def fit(
        self,
        real_x: np.ndarray,
        real_y: np.ndarray | None,
        synth_x: np.ndarray,
        synth_y: np.ndarray | None,
        *,
        seed: int,
    ) -> dict[str, float]:
        """Train on real (label 0) vs synthetic (label 1); return held-out AUC and keep rate."""
        feats = np.vstack([_features(real_x, real_y), _features(synth_x, synth_y)])
        target = np.r_[np.zeros(len(real_x)), np.ones(len(synth_x))].astype(np.int64)
        rng = np.random.default_rng(seed)
        order = rng.permutation(len(feats))
        n_hold = int(round(self.holdout * len(feats)))
        hold, train = order[:n_hold], order[n_hold:]
        # Shallow, regularised trees: an over-confident filter would drop plausible rows.
        with threadpool_limits(limits=_threads()):
            self.model = HistGradientBoostingClassifier(
                max_iter=150,
                learning_rate=0.05,
                max_leaf_nodes=15,
                l2_regularization=1.0,
                early_stopping=True,
                validation_fraction=0.15,
                random_state=seed,
            ).fit(feats[train], target[train])
            p_synth = self.model.predict_proba(feats[hold])[:, 1]
        auc = (
            float(roc_auc_score(target[hold], p_synth))
            if len(np.unique(target[hold])) == 2
            else float("nan")
        )
        synth_hold = target[hold] == 1
        keep_rate = (
            float((p_synth[synth_hold] < self.confidence).mean()) if synth_hold.any() else 1.0
        )
        return {"filter_auc": auc, "filter_keep_rate": keep_rate}

    def keep(self, x: np.ndarray, y: np.ndarray | None) -> np.ndarray:
        """Boolean mask of the synthetic rows to keep."""
        return self.synthetic_probability(x, y) < self.confidence

    def synthetic_probability(self, x: np.ndarray, y: np.ndarray | None) -> np.ndarray:
        if self.model is None:
            raise RuntimeError("fit() the filter first")
        with threadpool_limits(limits=_threads()):
            return self.model.predict_proba(_features(x, y))[:, 1]
