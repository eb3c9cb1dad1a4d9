"""Baseline b and MIA for text chunks (``CLASSIFIERS.register("text")``).

Both see the chunk's tokens and the per-token loss sequence of a language model (h for the
baseline, f for the MIA; with ``classifier.helper_reference`` the MIA also sees h's, i.e.
difficulty calibration). ``classifier.design`` picks one of two designs:

``gbm`` (default)
    Gradient boosting on hand-made features (:mod:`audit.text.features`): statistics and
    sorted values of the loss sequence(s), the loss difference to the reference, a
    naive-Bayes unigram/bigram ratio learned on the training split (out-of-fold there) and
    repetition statistics. Learning rate and rounds are selected on validation with
    ``select_by`` (the lower bound), ties broken by AUC.
``stacked``
    The paper's design (App. C.2) at a CPU-sized scale: a small transformer encoder over the
    tokens, whose pooled hidden state is concatenated with a projection of the loss
    sequence(s) and fed to a linear head. Training has two phases: first only the
    loss-feature branch and the head, then everything, with weight decay; the epoch is
    chosen on validation by ``select_by``. See :mod:`audit.text.neural`.
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
from panoramia_fl.audit.text.features import (
    NaiveBayesRatio,
    calibrated_stats,
    loss_stats,
    out_of_fold_ratios,
    repetition_stats,
)


def design_matrix(data: ClassifierData, ratios: np.ndarray, *, use_reference: bool) -> np.ndarray:
    """Loss statistics (+ reference and calibrated ones), naive-Bayes ratios, repetition."""
    parts = [loss_stats(data.features), ratios, repetition_stats(data.records.x)]
    if use_reference and data.reference is not None:
        parts += [loss_stats(data.reference), calibrated_stats(data.features, data.reference)]
    return data.with_calibration(np.hstack(parts).astype(np.float32))


class TextGradientBoosting(ValidatedBoosting):
    """``gbm`` design; see the module docstring."""

    def __init__(
        self,
        *,
        iterations: list[int],
        learning_rates: list[float],
        max_leaf_nodes: int,
        use_reference: bool,
        folds: int = 5,
    ) -> None:
        super().__init__(
            iterations=iterations, learning_rates=learning_rates, max_leaf_nodes=max_leaf_nodes
        )
        self.use_reference = use_reference
        self.folds = folds
        self.ratios: NaiveBayesRatio | None = None

    def fit(
        self, train: ClassifierData, val: ClassifierData, *, select_by: SelectionScore, seed: int
    ) -> dict[str, object]:
        st = self.membership(train)
        self.ratios = NaiveBayesRatio().fit(train.records.x, st)
        # out-of-fold ratios on the training split: in-fold ones would over-state them
        xt = design_matrix(
            train,
            out_of_fold_ratios(train.records.x, st, folds=self.folds, seed=seed),
            use_reference=self.use_reference,
        )
        xv = design_matrix(
            val, self.ratios.transform(val.records.x), use_reference=self.use_reference
        )
        sv = np.asarray(val.membership).astype(np.int64)
        return self.fit_matrices(xt, st, xv, sv, select_by=select_by, seed=seed)

    def score(self, data: ClassifierData) -> np.ndarray:
        if self.ratios is None:
            raise RuntimeError("fit() the classifier before scoring")
        return self.score_matrix(
            design_matrix(
                data, self.ratios.transform(data.records.x), use_reference=self.use_reference
            )
        )


@CLASSIFIERS.register("text")
def make_text_classifier(config: AuditConfig, context: AuditContext):
    """The design named by ``classifier.design`` (``gbm`` or ``stacked``)."""
    cc = config.classifier
    design = getattr(cc, "design", "gbm")
    if design == "stacked":
        from panoramia_fl.audit.text.neural import TextNeuralClassifier

        epochs = sorted(set(cc.epochs))
        return TextNeuralClassifier(
            vocab_size=int(context.task.num_classes),
            epochs=epochs[:1] if config.quick else epochs,
            learning_rate=cc.learning_rate,
            weight_decay=cc.weight_decay,
            batch_size=cc.batch_size,
            use_reference=cc.helper_reference,
            device=context.device,
        )
    iterations = sorted(set(cc.gbm_iterations))
    return TextGradientBoosting(
        iterations=iterations[:2] if config.quick else iterations,
        learning_rates=cc.gbm_learning_rates,
        max_leaf_nodes=cc.gbm_max_leaf_nodes,
        use_reference=cc.helper_reference,
    )
