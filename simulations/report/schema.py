"""Typed models of the consortium report (``report.json``) and the sweep report (``sweep.json``).

Plain frozen dataclasses: the writers render them, :func:`to_jsonable` serialises them. The
report never carries raw records or per-record scores: only summary numbers from ``audits/``,
``metrics.jsonl`` and ``partition.json``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

REPORT_SCHEMA_VERSION = 2
"""2: two-sided game per site and side, low-FPR ROC figures, bound levels."""
SWEEP_SCHEMA_VERSION = 2
"""2: the two-sided eps_tilde beside the one-sided one."""
SITE_REPORT_SCHEMA_VERSION = 1
"""1: a site's own report (site-reports/site-<id>.json)."""

SiteStatus = Literal["ok", "failed", "missing"]
Side = Literal["member", "nonmember"]

SIDES: tuple[Side, ...] = ("member", "nonmember")
"""The two sides of the two-sided game, in display order."""

SCORERS: tuple[str, ...] = ("baseline", "mia", "rm_rn")
"""Score vectors with a ROC: b, the MIA (the game) and RM;RN (real non-members)."""

TPR_FPR_KEYS: tuple[str, ...] = ("0.01", "0.001")
"""FPR levels of ``<scorer>_tpr_at_fpr``; the audit's ``audit.roc.LOW_FPRS`` formatted ``:g``."""


@dataclass(frozen=True)
class IntervalReport:
    """Mean, std and 95% t-interval over repeats, as in :class:`audit.result.Interval`."""

    mean: float | None
    std: float | None
    low: float | None
    high: float | None
    n: int | None


@dataclass(frozen=True)
class FlagsReport:
    """The audit's power diagnosis (see :class:`audit.result.AuditFlags`)."""

    saturated: bool
    c_lb_not_tight: bool
    reasons: list[str] = field(default_factory=list)
    rm_rn_capped: bool = False


@dataclass(frozen=True)
class RepeatReport:
    """Scalars of one repeat (no curves, no per-record scores)."""

    seed: int
    m: int
    c_lb: float | None
    c_eps_lb: float | None
    eps_tilde: float | None
    ceiling: float | None
    baseline_auc: float | None
    mia_auc: float | None
    rm_rn_eps_lb: float | None
    o1_eps_lb: float | None
    eps_tilde_two_sided: float | None = None
    member_c_lb: float | None = None
    """The two-sided game's member side (level beta/4), not the one-sided c_lb (beta/2)."""
    member_c_eps_lb: float | None = None
    nonmember_c_lb: float | None = None
    nonmember_c_eps_lb: float | None = None
    rm_rn_eps_lb_two_sided: float | None = None


@dataclass(frozen=True)
class SideReport:
    """One side of the two-sided game (see :class:`audit.result.SideResult`)."""

    c_lb: float | None
    c_lb_interval: IntervalReport | None
    c_eps_lb: float | None
    c_eps_lb_interval: IntervalReport | None
    eps_tilde: float | None
    eps_tilde_interval: IntervalReport | None
    ceiling: float | None
    headroom: float | None
    """ceiling - c_lb on this side."""
    flags: FlagsReport
    rm_rn_eps_lb: float | None
    rm_rn_eps_lb_interval: IntervalReport | None
    rm_rn_ceiling: float | None


@dataclass(frozen=True)
class TwoSidedReport:
    """Both sides of the two-sided game; each of its four bounds is at level ``beta``."""

    beta: float | None
    member: SideReport
    nonmember: SideReport


@dataclass(frozen=True)
class SiteReport:
    """One site's audit, or why there is none (``status`` "failed" / "missing")."""

    site_id: int
    status: SiteStatus
    error: str | None
    n_members: int | None
    n_holdout: int | None
    modality: str | None
    generator_kind: str | None
    beta: float | None
    n_repeats: int | None
    c_lb: float | None
    c_lb_interval: IntervalReport | None
    c_eps_lb: float | None
    c_eps_lb_interval: IntervalReport | None
    eps_tilde: float | None
    """The AuditResult's eps_tilde mean, copied, never recomputed."""
    eps_tilde_interval: IntervalReport | None
    ceiling: float | None
    headroom: float | None
    """ceiling - c_lb: the most eps_tilde could read on this audit set."""
    flags: FlagsReport | None
    rm_rn_eps_lb: float | None
    rm_rn_eps_lb_interval: IntervalReport | None
    o1_eps_lb: float | None
    o1_eps_lb_interval: IntervalReport | None
    dp_epsilon: float | None
    """Accountant epsilon; None without DP."""
    dp_epsilon_source: Literal["audit", "metrics"] | None
    baseline_auc: float | None
    mia_auc: float | None
    elapsed_s: float | None
    eps_tilde_two_sided: float | None = None
    """The two-sided eps_tilde mean (max over the sides per repeat), copied."""
    eps_tilde_two_sided_interval: IntervalReport | None = None
    two_sided_side: Side | None = None
    """The side whose mean eps_tilde is larger."""
    two_sided: TwoSidedReport | None = None
    rm_rn_eps_lb_two_sided: float | None = None
    rm_rn_eps_lb_two_sided_interval: IntervalReport | None = None
    rm_rn_auc: float | None = None
    baseline_tpr_at_fpr: dict[str, float | None] | None = None
    """TPR at the FPRs :data:`TPR_FPR_KEYS` (mean over repeats); likewise for mia and rm_rn."""
    mia_tpr_at_fpr: dict[str, float | None] | None = None
    rm_rn_tpr_at_fpr: dict[str, float | None] | None = None
    levels: dict[str, float] = field(default_factory=dict)
    """Level of each bound, as the audit states it (empty for audit schema version 1)."""
    sizes: dict[str, int] = field(default_factory=dict)
    quality: dict[str, float] = field(default_factory=dict)
    repeats: list[RepeatReport] = field(default_factory=list)


@dataclass(frozen=True)
class SiteRoundReport:
    """One site's numbers in one round of ``metrics.jsonl``."""

    train_loss: float | None
    dp_epsilon: float | None
    num_examples: int | None


@dataclass(frozen=True)
class RoundReport:
    """One line of ``metrics.jsonl``."""

    round: int
    global_loss: float | None
    global_accuracy: float | None
    elapsed_s: float | None
    sites: dict[str, SiteRoundReport] = field(default_factory=dict)


@dataclass(frozen=True)
class FlaggedSites:
    """Ids of the ok sites with each flag raised (one game or one side of it)."""

    saturated_sites: list[int]
    not_tight_sites: list[int]
    rm_rn_capped_sites: list[int]


@dataclass(frozen=True)
class ConsortiumSummary:
    """Consortium-wide reading of the ok sites."""

    n_sites: int
    n_ok: int
    n_failed: int
    n_missing: int
    max_eps_tilde: float | None
    median_eps_tilde: float | None
    leakiest_site_id: int | None
    max_eps_tilde_two_sided: float | None
    leakiest_site_id_two_sided: int | None
    saturated_sites: list[int]
    not_tight_sites: list[int]
    rm_rn_capped_sites: list[int]
    two_sided_flagged_sites: dict[str, FlaggedSites]
    """Per side ("member", "nonmember") of the two-sided game; empty when no site has one."""
    failed_sites: list[int]
    missing_sites: list[int]
    max_dp_epsilon: float | None
    rounds_completed: int
    final_global_loss: float | None
    final_global_accuracy: float | None
    meaning: str
    two_sided_meaning: str


@dataclass(frozen=True)
class RunReport:
    """Everything ``report.json`` holds."""

    schema_version: int
    run: dict[str, Any]
    partition: dict[str, Any]
    rounds: list[RoundReport]
    sites: list[SiteReport]
    consortium: ConsortiumSummary


@dataclass(frozen=True)
class SweepSiteRow:
    """One site of one sweep point."""

    site_id: int
    status: SiteStatus
    error: str | None
    theoretical_eps: float | None
    """Accountant epsilon; None when DP is off (plotted at "inf") or unknown."""
    eps_tilde: float | None
    eps_tilde_interval: IntervalReport | None
    eps_tilde_two_sided: float | None
    eps_tilde_two_sided_interval: IntervalReport | None
    two_sided_side: Side | None
    c_lb: float | None
    ceiling: float | None
    flags: FlagsReport | None
    rm_rn_eps_lb: float | None
    rm_rn_eps_lb_interval: IntervalReport | None
    rm_rn_eps_lb_two_sided: float | None
    rm_rn_eps_lb_two_sided_interval: IntervalReport | None
    o1_eps_lb: float | None
    o1_eps_lb_interval: IntervalReport | None


@dataclass(frozen=True)
class SweepPointReport:
    """One point of a sweep: a run with some config overrides."""

    label: str
    overrides: dict[str, Any]
    run_dir: str
    status: Literal["complete", "incomplete"]
    problems: list[str]
    private: bool | None
    """True when DP is on, False when off, None when the run says neither."""
    theoretical_eps: float | None
    """Largest site accountant epsilon (the consortium's weakest guarantee)."""
    global_accuracy: float | None
    global_loss: float | None
    rounds_completed: int
    max_eps_tilde: float | None
    max_eps_tilde_two_sided: float | None
    sites: list[SweepSiteRow]
    report_html: str | None
    """Relative path of the point's own report.html, when one exists."""


@dataclass(frozen=True)
class SweepReport:
    """Everything ``sweep.json`` holds."""

    schema_version: int
    points: list[SweepPointReport]
    meaning: str
    two_sided_meaning: str


@dataclass(frozen=True)
class PlainReading:
    """A site's result in plain language, for a privacy officer (no notation needed)."""

    verdict: Literal["evidence", "inconclusive", "none", "no result"]
    """"evidence": the two-sided eps_tilde's 95% interval lies above 0; "inconclusive": its
    mean is above 0 but the interval reaches 0; "none": it reads 0; "no result": failed."""
    headline: str
    measured: list[str]
    """What was measured."""
    meaning: list[str]
    """What it means for the site's records (flags included)."""
    not_shown: list[str]
    """What it does not show."""


@dataclass(frozen=True)
class ConsortiumStanding:
    """Where a site stands among the consortium's audited sites, without naming any other.

    Ranked by the two-sided eps_tilde (1 = the most leakage measured). The median and max
    are withheld below :data:`~.standing.MIN_SITES_FOR_STATISTICS` ranked sites, where
    they would give another site's own number away.
    """

    available: bool
    note: str
    rank: int | None = None
    n_ranked: int | None = None
    median_eps_tilde_two_sided: float | None = None
    max_eps_tilde_two_sided: float | None = None


@dataclass(frozen=True)
class ReproManifest:
    """What it takes to reproduce a site's audit."""

    config_file: str | None
    """The config read (relative to the run directory), or None when there was none."""
    config_sha256: str | None
    run_seed: int | None
    audit_seed: int | None
    """``audit.settings.seed`` of the config; each site derives its audit seed from it."""
    repeat_seeds: list[int]
    """The seeds the site's audit repeats used, as its result records them."""
    packages: dict[str, str | None]
    """Versions of the environment that wrote this report (None: not installed)."""
    python: str
    git_commit: str | None
    """The project's commit where it runs from a git checkout, else None."""
    git_dirty: bool | None
    """True when tracked files differ from that commit (uncommitted changes)."""
    data_sizes: dict[str, int]
    """The audit's ``sizes`` (members, game size m, splits, generated records, ...)."""


@dataclass(frozen=True)
class SitePageReport:
    """Everything a site's own report (``site-reports/site-<id>.json`` / ``.html``) holds.

    Only the site's own numbers and consortium-wide statistics: no other site's numbers or
    ids, and never the site-local exposed records themselves (only a link to their file).
    """

    schema_version: int
    run_name: str | None
    site: SiteReport
    reading: PlainReading
    threat_model: list[str]
    standing: ConsortiumStanding
    manifest: ReproManifest
    exposed_records_link: str | None
    """Relative link to the site-local exposed-records file, when it exists."""
    source: Literal["consortium", "site"]
    """"consortium": written by the report aggregator; "site": rebuilt by the site from its
    own audit file alone (``panoramia-fl report RUN_DIR --site ID``)."""


@dataclass(frozen=True)
class ReportFiles:
    """Paths written by a report writer (None for a format it does not write)."""

    json_path: Path
    html_path: Path
    csv_path: Path | None = None
    md_path: Path | None = None
    site_reports: list[ReportFiles] = field(default_factory=list)
    """Each site's own report (``site-reports/site-<id>.*``), written beside report.*."""


def to_jsonable(obj: Any) -> Any:
    """Plain JSON types from dataclasses; non-finite floats become None (JSON has no inf/nan)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
