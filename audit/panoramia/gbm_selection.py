"""Gradient boosting with its learning rate and number of rounds chosen on validation.

Shared by the tabular and text membership classifiers: every candidate is scored by the
lower bound on the validation split (ties broken by AUC), never on the game's test split.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.ensemble import HistGradientBoostingClassifier
from threadpoolctl import threadpool_limits

from panoramia_fl.audit.panoramia.components import ClassifierData, SelectionScore
from panoramia_fl.audit.stats.roc import auc


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


class ValidatedBoosting:
    """A membership classifier on a design matrix: boosting whose rate and rounds are chosen
    on validation. Subclasses turn :class:`ClassifierData` into matrices and call
    :meth:`fit_matrices` / :meth:`score_matrix`."""

    def __init__(
        self, *, iterations: Sequence[int], learning_rates: Sequence[float], max_leaf_nodes: int
    ) -> None:
        if not iterations or not learning_rates:
            raise ValueError("classifier.gbm_iterations and gbm_learning_rates must be non-empty")
        self.iterations = sorted({int(i) for i in iterations})
        self.learning_rates = list(learning_rates)
        self.max_leaf_nodes = max_leaf_nodes
        self.model: HistGradientBoostingClassifier | None = None
        self.rounds = 0

    @staticmethod
    def membership(data: ClassifierData) -> np.ndarray:
        """Labels of ``data`` as int64; a single class cannot train a classifier."""
        s = np.asarray(data.membership).astype(np.int64)
        if len(np.unique(s)) < 2:
            raise ValueError("membership classifier: the training data has a single class")
        return s

    def fit_matrices(
        self,
        xt: np.ndarray,
        st: np.ndarray,
        xv: np.ndarray,
        sv: np.ndarray,
        *,
        select_by: SelectionScore,
        seed: int,
    ) -> dict[str, object]:
        with threadpool_limits(limits=_threads()):
            picked = fit_selected_boosting(
                xt,
                st,
                xv,
                sv,
                learning_rates=self.learning_rates,
                iterations=self.iterations,
                max_leaf_nodes=self.max_leaf_nodes,
                select_by=select_by,
                seed=seed,
            )
        self.model, self.rounds = picked.model, picked.rounds
        return picked.info

    def score_matrix(self, x: np.ndarray) -> np.ndarray:
        """The selected model's decision values (at the selected round count)."""
        if self.model is None:
            raise RuntimeError("fit() the classifier before scoring")
        out = None
        with threadpool_limits(limits=_threads()):
            for stage, dec in enumerate(self.model.staged_decision_function(x), start=1):
                out = dec
                if stage == self.rounds:
                    break
        return np.asarray(out, dtype=np.float64)


def _threads() -> int:
    return max(1, torch.get_num_threads())
