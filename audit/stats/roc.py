"""Low-FPR view of a membership score vector: AUC, TPR at 1% and 0.1% FPR, log-scale ROC.

A bound summarises one threshold; the ROC at low false-positive rates shows whether a few
records are exposed with high confidence (Carlini et al. 2022), which is what a site's
privacy officer asks about. Curves are read on one fixed log-spaced FPR grid, so repeats
average point by point.
"""

from __future__ import annotations

import numpy as np

from panoramia_fl.audit.result import RocSummary
from panoramia_fl.audit.stats.bounds import _check_inputs

LOW_FPRS = (0.01, 0.001)
"""FPR levels reported as ``tpr_at_fpr``."""

FPR_GRID = tuple(float(x) for x in np.geomspace(1e-3, 1.0, 31))
"""FPR points of the stored curve (log-spaced, 0.1% to 100%)."""


def _fpr_key(fpr: float) -> str:
    return f"{fpr:g}"


def tpr_at(fpr: np.ndarray, tpr: np.ndarray, level: float) -> float:
    """Largest TPR among thresholds whose FPR is at most ``level`` (0 when none)."""
    ok = fpr <= level + 1e-12
    return float(tpr[ok].max()) if ok.any() else 0.0


def roc_summary(scores: object, membership: object) -> RocSummary:
    """ROC of ``scores`` (higher = member) against ``membership`` (1 = member)."""
    from sklearn.metrics import roc_auc_score, roc_curve

    t, s = _check_inputs(scores, membership)
    fpr, tpr, _ = roc_curve(s, t)
    return RocSummary(
        auc=float(roc_auc_score(s, t)),
        tpr_at_fpr={_fpr_key(level): tpr_at(fpr, tpr, level) for level in LOW_FPRS},
        fpr=list(FPR_GRID),
        tpr=[tpr_at(fpr, tpr, level) for level in FPR_GRID],
    )


def mean_roc(rocs: list[RocSummary]) -> RocSummary:
    """Point-wise mean of ROC summaries on the shared grid (vertical averaging)."""
    if not rocs:
        raise ValueError("mean_roc needs at least one ROC summary")
    keys = rocs[0].tpr_at_fpr.keys()
    return RocSummary(
        auc=float(np.mean([r.auc for r in rocs])),
        tpr_at_fpr={k: float(np.mean([r.tpr_at_fpr[k] for r in rocs])) for k in keys},
        fpr=list(rocs[0].fpr),
        tpr=[float(v) for v in np.mean([r.tpr for r in rocs], axis=0)],
    )


def auc(scores: np.ndarray, membership: np.ndarray) -> float:
    """ROC AUC of membership scores (0.5 when one class is missing)."""
    from sklearn.metrics import roc_auc_score

    s = np.asarray(membership)
    return 0.5 if s.min() == s.max() else float(roc_auc_score(s, scores))
