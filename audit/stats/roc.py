"""Low-FPR view of a membership score vector: AUC, TPR at 1% and 0.1% FPR, log-scale ROC.

A bound summarises one threshold; the ROC at low false-positive rates shows whether a few
records are exposed with high confidence (Carlini et al. 2022), which is what a site's
privacy officer asks about. Curves are read on one fixed log-spaced FPR grid, so repeats
average point by point.

The curve is computed here with numpy rather than by scikit-learn's ``roc_curve``: every
site's audit reads it, and importing scikit-learn (with the SciPy modules it loads) cost a
site's process 1.6 CPU-s, longer than scoring the default's records. The points and the area
are scikit-learn's to the bit (``tests/test_roc.py`` holds them against it).
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


def roc_points(scores: np.ndarray, membership: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(FPR, TPR) at every distinct threshold of ``scores`` (higher = member), from (0, 0) to
    (1, 1), the points inside a straight run of the curve left out (scikit-learn's
    ``roc_curve`` with ``drop_intermediate=True``). ``membership`` holds 0 / 1 with both
    present."""
    order = np.argsort(scores, kind="stable")[::-1]
    ranked, members = scores[order], membership[order].astype(float)
    # The last record of each run of equal scores: a threshold admits a whole run or none.
    ends = np.flatnonzero(np.r_[ranked[1:] != ranked[:-1], True])
    tps = np.cumsum(members)[ends]
    fps = 1.0 + ends - tps
    if fps.size > 2:
        # A point is kept where the curve turns: its step differs from the next one's.
        turns = np.logical_or(np.diff(fps, 2), np.diff(tps, 2))
        keep = np.r_[True, turns, True]
        fps, tps = fps[keep], tps[keep]
    fps, tps = np.r_[0.0, fps], np.r_[0.0, tps]
    return fps / fps[-1], tps / tps[-1]


def _area(fpr: np.ndarray, tpr: np.ndarray) -> float:
    """Trapezoidal area under (``fpr``, ``tpr``), ``fpr`` non-decreasing."""
    return float(np.trapezoid(tpr, fpr))


def roc_summary(scores: object, membership: object) -> RocSummary:
    """ROC of ``scores`` (higher = member) against ``membership`` (1 = member)."""
    t, s = _check_inputs(scores, membership)
    fpr, tpr = roc_points(t, s)
    return RocSummary(
        auc=_area(fpr, tpr),
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
    s = np.asarray(membership)
    if s.min() == s.max():
        return 0.5
    return _area(*roc_points(np.asarray(scores, dtype=float), s == s.max()))
