"""Gradient boosting with its learning rate and number of rounds chosen on validation.

Shared by the tabular and text membership classifiers: every candidate is scored by the
lower bound on the validation split (ties broken by AUC), never on the game's test split.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.metrics import roc_auc_score

from audit.components import SelectionScore


def auc(scores: np.ndarray, membership: np.ndarray) -> float:
    return float(roc_auc_score(membership, scores)) if len(np.unique(membership)) == 2 else 0.5


@dataclass(frozen=True)
class SelectedBoosting:
    model: HistGradientBoostingClassifier
    rounds: int
    info: dict[str, object]


def fit_selected_boosting(
    xt: np.ndarray,
    st: np.ndarray,
    xv: np.ndarray,
    sv: np.ndarray,
    *,
    learning_rates: Sequence[float],
    iterations: Sequence[int],
    max_leaf_nodes: int,
    select_by: SelectionScore,
    seed: int,
) -> SelectedBoosting:
    """Fit one model per learning rate and keep the (rate, round) that maximises
    ``select_by`` on ``(xv, sv)``."""
    best: tuple[float, float] | None = None
    chosen: SelectedBoosting | None = None
    for lr in learning_rates:
        model = HistGradientBoostingClassifier(
            learning_rate=lr,
            max_iter=max(iterations),
            max_leaf_nodes=max_leaf_nodes,
            l2_regularization=1.0,
            early_stopping=False,
            random_state=seed,
        ).fit(xt, st)
        for stage, dec in enumerate(model.staged_decision_function(xv), start=1):
            if stage not in iterations:
                continue
            key = (float(select_by(dec, sv)), auc(dec, sv))
            if best is None or key > best:
                best = key
                chosen = SelectedBoosting(model, stage, {"learning_rate": lr, "rounds": stage})
    assert chosen is not None and best is not None
    info = {
        "design": "gbm",
        **chosen.info,
        "val_bound": best[0],
        "val_auc": best[1],
        "inputs": int(xt.shape[1]),
    }
    return SelectedBoosting(chosen.model, chosen.rounds, info)
