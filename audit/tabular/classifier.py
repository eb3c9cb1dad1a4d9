"""Baseline b and MIA for tabular records: gradient boosting on row + loss features.

Both classifiers see the encoded row ``x``, its label and the loss features of a model on it
(``[loss, logits]`` of h for the baseline, of f for the MIA, see
:meth:`audit.panoramia.task.AuditTask.loss_features`). With ``classifier.helper_reference``
the MIA also sees h's features and the difference of the two losses (trees cannot subtract
columns; the difference is the difficulty-calibrated loss).

Selection (the paper's grid search, Appendix C.3): for each learning rate in
``classifier.gbm_learning_rates`` one model with ``max(gbm_iterations)`` rounds is fitted
and its staged scores are read at every round count in ``classifier.gbm_iterations``; the
candidate with the highest lower bound on the validation split (``select_by``) wins, ties
broken by the validation AUC. ``quick`` keeps the two smallest round counts.
"""

from __future__ import annotations

import numpy as np

from panoramia_fl.audit.config import AuditConfig
from panoramia_fl.audit.panoramia.components import (
    CLASSIFIERS,
    AuditContext,
    ClassifierData,
    SelectionScore,
)
from panoramia_fl.audit.panoramia.gbm_selection import ValidatedBoosting


def design_matrix(data: ClassifierData, *, use_reference: bool) -> np.ndarray:
    """``[x, y, features]`` (+ ``[reference, loss - reference loss]`` when used), then the
    calibrated statistics when present."""
    n = len(data.records)
    x = np.asarray(data.records.x, dtype=np.float32).reshape(n, -1)
    feats = np.asarray(data.features, dtype=np.float32).reshape(n, -1)
    parts = [x]
    if data.records.y is not None:
        parts.append(np.asarray(data.records.y, dtype=np.float32).reshape(n, 1))
    parts.append(feats)
    if use_reference and data.reference is not None:
        ref = np.asarray(data.reference, dtype=np.float32).reshape(n, -1)
        parts += [ref, (feats[:, 0] - ref[:, 0])[:, None]]
    return data.with_calibration(np.hstack(parts))


class GradientBoostingMembership(ValidatedBoosting):
    """Membership classifier (baseline or MIA) with staged round selection.

    Parameters
    ----------
    iterations, learning_rates, max_leaf_nodes
        The selection grid (see the module docstring).
    use_reference
        Feed ``ClassifierData.reference`` (h's features) when present (MIA calibration).
    """

    def __init__(
        self,
        *,
        iterations: list[int],
        learning_rates: list[float],
        max_leaf_nodes: int = 15,
        use_reference: bool = True,
    ) -> None:
        super().__init__(
            iterations=iterations, learning_rates=learning_rates, max_leaf_nodes=max_leaf_nodes
        )
        self.use_reference = use_reference

    def fit(
        self, train: ClassifierData, val: ClassifierData, *, select_by: SelectionScore, seed: int
    ) -> dict[str, object]:
        return self.fit_matrices(
            design_matrix(train, use_reference=self.use_reference),
            self.membership(train),
            design_matrix(val, use_reference=self.use_reference),
            np.asarray(val.membership).astype(np.int64),
            select_by=select_by,
            seed=seed,
        )

    def score(self, data: ClassifierData) -> np.ndarray:
        return self.score_matrix(design_matrix(data, use_reference=self.use_reference))


@CLASSIFIERS.register("tabular")
def make_tabular_classifier(
    config: AuditConfig, context: AuditContext
) -> GradientBoostingMembership:
    """Gradient boosting configured by ``classifier.gbm_*`` (see the module docstring)."""
    del context
    cc = config.classifier
    iterations = sorted(set(cc.gbm_iterations))
    return GradientBoostingMembership(
        iterations=iterations[:2] if config.quick else iterations,
        learning_rates=cc.gbm_learning_rates,
        max_leaf_nodes=cc.gbm_max_leaf_nodes,
        use_reference=cc.helper_reference,
    )
