"""What a sweep's report holds (``sweep.json``): its points, each with its run's sites, and
the comparisons between points; declared as :mod:`.schema` declares a run's report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from panoramia_fl.contracts.dp_level import DPLevel, SecureAggregationMode
from panoramia_fl.contracts.run_log import ClientDPFile

from .replicate_schema import ReplicateReport
from .schema import SiteReport


@dataclass(frozen=True)
class PointComparison:
    """Two sweep points compared on one site's number by a paired test over their seeds."""

    site_id: int
    metric: str
    first: str
    second: str
    """The points' labels."""
    n_pairs: int
    """Seeds that both points have a value for."""
    mean_first: float | None
    mean_second: float | None
    p_value: float | None
    """Two-sided paired t-test over the seeds (None below 2 pairs)."""
    alpha: float
    """The level each comparison is held to (0.05 over all the sweep's comparisons)."""


@dataclass(frozen=True)
class SweepPointReport:
    """One point of a sweep: a run with some config overrides (an unreadable run: the
    defaults)."""

    label: str
    overrides: dict[str, Any]
    run_dir: str
    status: Literal["complete", "incomplete"]
    problems: list[str]
    private: bool | None = None
    """True when DP is on at any level, False when off, None when the run says neither."""
    theoretical_eps: float | None = None
    """The largest site's record-level accountant epsilon (the weakest guarantee)."""
    global_accuracy: float | None = None
    global_loss: float | None = None
    rounds_completed: int = 0
    max_eps_tilde: float | None = None
    max_eps_tilde_two_sided: float | None = None
    sites: list[SiteReport] = field(default_factory=list)
    report_html: str | None = None
    dp_level: DPLevel | None = None
    canaries: int | None = None
    replicates: ReplicateReport | None = None
    """The point's runs over seeds (``replicates: N``): the replicate set of ``run_dir``,
    whose numbers the fields above are."""
    secure_aggregation: SecureAggregationMode = "none"
    client_dp: ClientDPFile | None = None
    """The point's client-level DP accounting (its mechanism, noise and clipping)."""


@dataclass(frozen=True)
class SweepReport:
    """Everything ``sweep.json`` holds."""

    schema_version: int
    points: list[SweepPointReport]
    meaning: str
    two_sided_meaning: str
    comparisons: list[PointComparison] = field(default_factory=list)
    """Neighbouring points with replicates, compared site by site (paired over seeds)."""
    unfinished: list[str] = field(default_factory=list)
    """The labels of the points the sweep had not finished when this was written (it is
    written after each point; a stopped sweep's stays so)."""
