"""The audit's ROC (``audit.stats.roc``) against scikit-learn's, bit for bit, and what a site's
process no longer imports for it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score, roc_curve

from panoramia_fl.audit.stats.roc import auc, roc_points, roc_summary, tpr_at


def _games() -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Score vectors of the shapes an audit meets: continuous scores, heavy ties (rounded
    log-likelihoods), a perfect and an inverted score, a straight diagonal run (every
    threshold admits one member and one non-member), and a game of two records."""
    rng = np.random.default_rng(7)
    games = []
    for n in (2, 3, 10, 101, 2_000):
        s = rng.permutation(np.r_[0, 1, rng.integers(0, 2, n - 2)])
        games.append((f"continuous n={n}", rng.normal(size=n) + 0.8 * s, s))
        games.append((f"ties n={n}", np.round(rng.normal(size=n) + s, 1), s))
    s = np.r_[np.zeros(50), np.ones(50)].astype(int)
    games.append(("perfect", s + rng.uniform(0, 0.5, 100), s))
    games.append(("inverted", -(s + rng.uniform(0, 0.5, 100)), s))
    games.append(("diagonal", np.repeat(np.arange(20.0), 2), np.tile([0, 1], 20)))
    games.append(("one score", np.zeros(30), rng.permutation(np.r_[0, 1, rng.integers(0, 2, 28)])))
    return games


GAMES = _games()


@pytest.mark.parametrize("name,scores,membership", GAMES, ids=[g[0] for g in GAMES])
def test_points_and_area_are_scikit_learns(name, scores, membership):
    fpr, tpr = roc_points(scores, membership)
    sk_fpr, sk_tpr, _ = roc_curve(membership, scores)
    assert fpr.tobytes() == sk_fpr.tobytes() and tpr.tobytes() == sk_tpr.tobytes()
    sk_auc = float(roc_auc_score(membership, scores))
    assert roc_summary(scores, membership).auc == sk_auc
    assert auc(scores, membership) == sk_auc
    # tpr_at reads the kept points: a straight run's inner points are not among them.
    summary = roc_summary(scores, membership)
    assert summary.tpr == [tpr_at(sk_fpr, sk_tpr, level) for level in summary.fpr]


def test_auc_of_one_class_is_chance_and_labels_need_not_be_0_1():
    assert auc(np.arange(5.0), np.ones(5)) == 0.5
    scores = np.array([0.1, 0.9, 0.4, 0.7])
    assert auc(scores, np.array([False, True, False, True])) == 1.0
    assert auc(scores, np.array([-1, 1, -1, 1])) == 1.0


def test_infinite_scores_tie_with_each_other():
    scores = np.array([np.inf, np.inf, 1.0, -np.inf, 0.5, -np.inf])
    membership = np.array([1, 0, 1, 0, 0, 1])
    fpr, tpr = roc_points(scores, membership)
    # The two +inf records are one threshold (one member, one non-member): (1/3, 1/3).
    assert (fpr[1], tpr[1]) == (pytest.approx(1 / 3), pytest.approx(1 / 3))
    assert (fpr[-1], tpr[-1]) == (1.0, 1.0)


def test_a_sites_audit_statistics_import_neither_scikit_learn_nor_scipy_stats():
    """The ROC and the repeats' intervals in a fresh process: scikit-learn and scipy.stats
    (1.6 CPU-s of imports) stay out of a site's audit."""
    code = (
        "import sys, numpy as np\n"
        "from panoramia_fl.audit.result import Interval\n"
        "from panoramia_fl.audit.stats.roc import roc_summary\n"
        "rng = np.random.default_rng(0)\n"
        "roc_summary(rng.normal(size=200), rng.integers(0, 2, 200))\n"
        "Interval.of([1.0, 2.0, 4.0])\n"
        "print(sorted(m for m in ('sklearn', 'scipy.stats') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_interval_uses_students_t():
    from scipy.stats import t

    from panoramia_fl.audit.result import Interval

    values = [0.3, 0.5, 0.2, 0.9, 0.4]
    got = Interval.of(values)
    half = t.ppf(0.975, df=4) * np.std(values, ddof=1) / np.sqrt(5)
    assert got.high - got.mean == pytest.approx(half, rel=1e-12)
