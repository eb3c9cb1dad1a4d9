"""Result types of an audit: JSON-serialisable dataclasses (written by
:func:`contracts.json_values.json_safe`, read back by :func:`contracts.json_values.from_dict`).

Every eps_tilde travels with its c_lb, the game's ceiling, its interval and its flags. The
paper's one-sided game and each side of the two-sided game have one shape
(:class:`SideRepeat` in a repeat, :class:`SideResult` over repeats).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy

from panoramia_fl.contracts.json_values import FLAT_IN_OLDER

RESULT_SCHEMA_VERSION = 3
"""3: the one-sided game nested as ``one_sided``, as each side of the two-sided game is
(versions 1 and 2 held its keys in the result and each repeat: they still load). 2: two-sided
game, low-FPR ROC summaries, bound levels."""

EPS_TILDE_MEANING = (
    "eps_tilde = max(0, {c+eps}_lb - c_lb) measures how much better the MIA (which sees the "
    "target model) does than the baseline (which does not). It is a lower bound on the "
    "model's DP epsilon only when c_lb is tight, i.e. when the baseline is as good as any "
    "classifier at telling generated from real records; it is neither a lower nor an upper "
    "bound otherwise."
)

TWO_SIDED_MEANING = (
    'eps_tilde_two_sided also counts "non-member" guesses: the mirror of the generator\'s '
    "closeness (real records are at most e^c' less likely than generated ones) makes the game "
    "symmetric, so the same bounds apply with the labels and scores flipped. Each side has its "
    "own c_lb and {c+eps}_lb; eps_tilde_two_sided is the larger side's difference. All four "
    "bounds share beta (beta/4 each)."
)


def finite(value: object) -> float | None:
    """``value`` as a float; None when absent, not a number (a bool is not) or not finite."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass(frozen=True)
class BoundSummary:
    """The maximising threshold of one lower bound (see :mod:`audit.stats.bounds`)."""

    lower_bound: float
    threshold: float
    predictions: int
    true_positives: int
    precision: float
    recall: float
    beta: float


@dataclass(frozen=True)
class Curve:
    """Precision and the bound at a grid of recall levels."""

    recall: list[float]
    precision: list[float]
    bound: list[float]


@dataclass(frozen=True)
class Interval:
    """Mean, standard deviation and 95% t-interval over repeats."""

    mean: float
    std: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: list[float] | np.ndarray) -> Interval:
        arr = np.asarray(values, dtype=float)
        n = int(arr.size)
        mean = float(arr.mean())
        if n < 2:
            return cls(mean=mean, std=0.0, low=mean, high=mean, n=n)
        std = float(arr.std(ddof=1))
        # Student's t quantile: scipy.stats.t.ppf's own function, without importing
        # scipy.stats (1.1 CPU-s in every site's process).
        half = float(scipy.special.stdtrit(n - 1, 0.975)) * std / math.sqrt(n)
        return cls(mean=mean, std=std, low=mean - half, high=mean + half, n=n)


@dataclass(frozen=True)
class AuditFlags:
    """Diagnosis of the audit's power."""

    saturated: bool
    """c_lb within the margin of the ceiling: eps_tilde can only read headroom."""
    c_lb_not_tight: bool
    """eps_tilde above the RM;RN bound's upper interval: the baseline is too weak."""
    reasons: list[str] = field(default_factory=list)
    rm_rn_capped: bool = False
    """RM;RN's ceiling (few real non-members) leaves no room to check eps_tilde."""
    above_real_nonmembers: bool = False
    """eps_tilde's mean exceeds RM;RN's by more than the tolerance, intervals overlapping or
    not: the game's non-members read above real ones (:mod:`audit.panoramia.diagnosis`)."""


@dataclass(frozen=True)
class RocSummary:
    """ROC of one membership score vector: AUC, TPR at low FPRs, and the curve.

    ``fpr`` is a fixed log-spaced grid (shared by repeats, so curves can be averaged);
    ``tpr[i]`` is the largest TPR at a threshold whose FPR is at most ``fpr[i]``.
    ``tpr_at_fpr`` maps the FPR levels ``"0.01"`` and ``"0.001"`` to that TPR.
    """

    auc: float
    tpr_at_fpr: dict[str, float]
    fpr: list[float]
    tpr: list[float]


@dataclass(frozen=True)
class SideRepeat:
    """One game of one repeat: the paper's one-sided game, or a side of the two-sided game
    (``member`` or ``nonmember`` guesses)."""

    c_lb: float
    c_eps_lb: float
    eps_tilde: float
    ceiling: float
    baseline: BoundSummary
    mia: BoundSummary
    rm_rn_eps_lb: float | None = None
    rm_rn_ceiling: float | None = None


@dataclass(frozen=True)
class TwoSidedRepeat:
    """Both sides of one repeat; each of the four game bounds is at level ``beta``."""

    beta: float
    member: SideRepeat
    nonmember: SideRepeat
    eps_tilde: float
    """max over the sides of max(0, {c+eps}_lb - c_lb)."""
    rm_rn_eps_lb: float | None = None
    """max over the sides of RM;RN's bound (each side at ``beta``)."""
    selected: dict[str, Any] = field(default_factory=dict)
    """Classifier choices for the non-member side (selected on validation by that side)."""


@dataclass(frozen=True)
class ClassSlice:
    """The game's slots of one label in one repeat (:mod:`audit.panoramia.class_slices`)."""

    label: int
    slots: int
    eps_tilde: float
    """Two-sided eps_tilde inside the class, each of its four bounds at ``level``."""
    tpr_at_1pct_fpr: float | None
    """The member-side MIA's TPR at 1% FPR inside the class; None when the class's slots
    all show members or all show non-members."""
    ceiling: float
    """The member-side bound a perfect scorer reaches on the class's slots at ``level``."""
    level: float


@dataclass(frozen=True)
class ClassSliceResult:
    """One label's slice over repeats: the two-sided game on that label's slots, each bound at
    the two-sided level over the number of labels (:mod:`audit.panoramia.class_slices`)."""

    label: int
    slots: int
    """The fewest slots of this label in any repeat's game."""
    eps_tilde: Interval
    tpr_at_1pct_fpr: Interval | None
    level: float
    too_few: bool
    """Even a perfect attack could not reach the bound the class needs to say anything."""


@dataclass(frozen=True)
class RepeatResult:
    """One repeat: fresh b/MIA training split and a fresh game."""

    seed: int
    m: int
    one_sided: SideRepeat = field(metadata=FLAT_IN_OLDER)
    """The paper's game: member guesses only, each bound at the one-sided level (RM;RN's
    ceiling: the bound a perfect scorer reaches on its smaller audit set)."""
    baseline_curve: Curve
    mia_curve: Curve
    baseline_auc: float
    mia_auc: float
    o1_eps_lb: float | None = None
    selected: dict[str, Any] = field(default_factory=dict)
    """Hyper-parameters chosen on validation, per classifier."""
    scores: dict[str, list[float]] | None = None
    """Per-record game scores, only when the config asks for them."""
    two_sided: TwoSidedRepeat | None = None
    roc: dict[str, RocSummary] = field(default_factory=dict)
    """ROC of the game's ``baseline`` and ``mia`` scores and of ``rm_rn``'s."""
    members_shown: int | None = None
    """Coins that showed the member (the game's n_members)."""
    o1_eps_lb_fdp: float | None = None
    """O(1)'s f-DP (Gaussian) bound at the audit's delta, same guesses and level."""
    o1_fdp_mu: float | None = None
    """The Gaussian-DP mu that bound rejects."""
    per_class: list[ClassSlice] = field(default_factory=list)
    """The two-sided game inside each label (label-paired games only)."""


@dataclass(frozen=True)
class SideResult:
    """One side of the two-sided game aggregated over repeats, with its own diagnosis."""

    c_lb: Interval
    c_eps_lb: Interval
    eps_tilde: Interval
    ceiling: float
    flags: AuditFlags
    rm_rn_eps_lb: Interval | None = None
    rm_rn_ceiling: float | None = None

    @property
    def headroom(self) -> float | None:
        """ceiling - c_lb: the most eps_tilde could read on this audit set."""
        ceiling, c_lb = finite(self.ceiling), finite(self.c_lb.mean)
        return None if ceiling is None or c_lb is None else ceiling - c_lb


@dataclass(frozen=True)
class TwoSidedResult:
    """The two-sided game over repeats (see :data:`TWO_SIDED_MEANING`)."""

    beta: float
    """Level of each of the four bounds (b and MIA on each side)."""
    eps_tilde: Interval
    member: SideResult
    nonmember: SideResult
    rm_rn_eps_lb: Interval | None = None
    meaning: str = TWO_SIDED_MEANING
    flags: AuditFlags | None = None
    """The headline's own flags: its interval against RM;RN's two-sided one (None in files
    written before they existed)."""

    @property
    def side(self) -> str:
        """The side whose mean eps_tilde is larger (``member`` on ties)."""
        return (
            "nonmember" if self.nonmember.eps_tilde.mean > self.member.eps_tilde.mean else "member"
        )


@dataclass(frozen=True)
class PanoramiaResult:
    """The PANORAMIA game's result, under one name from the audit to the page: what
    :func:`audit.run_audit` returns, ``SiteResults.panoramia`` (key ``result`` in a reply and an
    audit file) and a site report's ``panoramia`` (key ``audit`` in report.json)."""

    modality: str
    generator_kind: str
    beta: float
    one_sided: SideResult = field(metadata=FLAT_IN_OLDER)
    """The paper's game (see :data:`EPS_TILDE_MEANING`), with its own diagnosis."""
    repeats: list[RepeatResult]
    sizes: dict[str, int]
    quality: dict[str, float]
    timings: dict[str, float]
    o1_eps_lb: Interval | None = None
    two_sided: TwoSidedResult | None = None
    roc: dict[str, RocSummary] = field(default_factory=dict)
    """Mean over repeats of each repeat's ROC (``baseline``, ``mia``, ``rm_rn``)."""
    levels: dict[str, float] = field(default_factory=dict)
    """Level of each reported bound (e.g. ``c_lb``: beta/2, ``two_sided``: beta/4 each)."""
    meaning: str = EPS_TILDE_MEANING
    schema_version: int = RESULT_SCHEMA_VERSION
    o1_eps_lb_fdp: Interval | None = None
    """O(1)'s f-DP (Gaussian) bound over repeats, eps at ``delta``."""
    o1_fdp_mu: Interval | None = None
    delta: float | None = None
    """delta of the f-DP bounds' eps (None in results written before them)."""
    per_class: list[ClassSliceResult] = field(default_factory=list)
    """Per-label slices over repeats; empty for unlabelled or unpaired games."""

    def auc(self, scorer: str) -> float | None:
        """A scorer's AUC (``baseline``, ``mia``: the mean of its repeats' AUCs; ``rm_rn``:
        that of the mean ROC); None when it did not run."""
        if scorer == "rm_rn":
            roc = self.roc.get(scorer)
            return None if roc is None else finite(roc.auc)
        aucs = [r.baseline_auc if scorer == "baseline" else r.mia_auc for r in self.repeats]
        found = [v for v in map(finite, aucs) if v is not None]
        return math.fsum(found) / len(found) if found else None
