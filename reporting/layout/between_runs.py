"""Numbers over several training runs of one config (a replicate set): which numbers, and
their between-run statistics.

A single run's intervals are over audit repeats of *one* trained model. Training seeds, DP
noise and floating-point differences between machines send training to other models, whose
leakage differs more than one audit's interval: a claim about a training procedure (a DP
setting, a strategy) needs several runs. :func:`pooled` lists the per-site headline numbers
a replicate report pools; a new one is one entry.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import scipy

from panoramia_fl.audit.result import finite

from ..numbers.formatting import fmt
from ..numbers.metrics import HOLDOUT_ACCURACY, RANGES, Metric
from ..numbers.report_parts import site_metrics
from ..schemas.replicate_schema import OverRuns, ReplicateReport
from ..schemas.schema import RunReport
from ..schemas.sweep_schema import PointComparison, SweepPointReport
from .columns import SiteRow

LEVEL = 0.95
"""The level of every between-run interval and of the sweep's comparisons (overall)."""


NO_COMPARISONS = "No two neighbouring points both ran over seeds: nothing to compare."


@dataclass(frozen=True)
class Pooled:
    """A per-site headline number pooled over runs."""

    key: str
    """Its key in ``replicates.json`` (``sites[].numbers``)."""
    label: str
    get: Callable[[SiteRow], float | None]
    bounds: tuple[float, float] = (0.0, math.inf)
    """The number's range: the between-run interval is clipped to it."""


def _pooled(m: Metric) -> Pooled:
    assert m.pooled is not None
    return Pooled(m.pooled, m.pooled_label or m.label, lambda r: m.value(r.site), RANGES[m.unit])


_GLOBAL_ACCURACY = Pooled(
    "global_accuracy", "global accuracy", lambda r: finite(r.global_accuracy), RANGES["fraction"]
)


@functools.cache
def pooled() -> tuple[Pooled, ...]:
    """The per-site headline numbers of a replicate report, in display order: those of the
    metric registry (:func:`~.report_parts.site_metrics`) that it pools, and the run's global
    accuracy (after the site's holdout accuracy)."""
    site = [_pooled(m) for m in site_metrics() if m.pooled is not None]
    at = [p.key for p in site].index(str(HOLDOUT_ACCURACY.pooled))
    return (*site[:at], _GLOBAL_ACCURACY, *site[at:])


def pooled_by_key() -> dict[str, Pooled]:
    return {m.key: m for m in pooled()}


HEADLINE = "eps_tilde_two_sided"
"""The number the pages quote and the sweep compares."""
ACCURACY = "global_accuracy"
"""The utility a sweep's error bars show beside it."""


def over_runs(values: Sequence[float | None], bounds: tuple[float, float]) -> OverRuns:
    """Mean, between-run interval, the mean's interval and range of the runs' ``values``."""
    xs = np.array([v for v in values if v is not None], dtype=float)
    n = len(xs)
    if n == 0:
        return OverRuns(list(values), 0, *(None,) * 8)
    mean = float(xs.mean())
    lowest, highest = float(xs.min()), float(xs.max())
    if n < 2:
        return OverRuns(list(values), n, mean, None, None, None, None, None, lowest, highest)
    sd = float(xs.std(ddof=1))
    t = float(scipy.stats.t.ppf(0.5 + LEVEL / 2, n - 1))
    # Another run: its own spread plus the uncertainty of the mean (a prediction interval).
    run_half, mean_half = t * sd * math.sqrt(1 + 1 / n), t * sd / math.sqrt(n)
    lo, hi = bounds
    return OverRuns(
        values=list(values),
        n=n,
        mean=mean,
        sd=sd,
        low=max(lo, mean - run_half),
        high=min(hi, mean + run_half),
        mean_low=max(lo, mean - mean_half),
        mean_high=min(hi, mean + mean_half),
        lowest=lowest,
        highest=highest,
    )


def paired_p_value(first: Sequence[float], second: Sequence[float]) -> float | None:
    """Two-sided paired t-test of equal means over seeds (None below 2 pairs)."""
    diffs = np.asarray(first, dtype=float) - np.asarray(second, dtype=float)
    if len(diffs) < 2:
        return None
    if np.allclose(diffs, diffs[0], rtol=0, atol=1e-12):
        # No spread in the differences: the t statistic is 0/0 or infinite.
        return 1.0 if abs(diffs[0]) <= 1e-12 else 0.0
    return float(scipy.stats.ttest_rel(first, second).pvalue)


def another_run_line(numbers: OverRuns) -> str | None:
    """The sentence on where another training run of the config would read the headline
    number; None below 2 runs (no spread to tell)."""
    if numbers.low is None or numbers.mean is None:
        return None
    return (
        f"Over {numbers.n} training runs of this config (other seeds, the same data), the "
        f"two-sided eps_tilde averaged {fmt(numbers.mean)} (runs read {fmt(numbers.lowest)} "
        f"to {fmt(numbers.highest)}): another training run of this config would read between "
        f"{fmt(numbers.low)} and {fmt(numbers.high)} (95%)."
    )


def run_lines(report: RunReport) -> list[str]:
    """report.html's line per site of a run in a replicate set (none outside one)."""
    sites = [] if report.replicates is None else report.replicates.sites
    lines = []
    for site in sites:
        line = another_run_line(site.numbers[HEADLINE]) if HEADLINE in site.numbers else None
        if line:
            lines.append(f"site {site.site_id}: {line}")
    return lines


def comparison_line(c: PointComparison) -> str:
    """One comparison in plain language, saying which test decided."""
    label = by_key[c.metric].label if c.metric in (by_key := pooled_by_key()) else c.metric
    head = (
        f"site {c.site_id}, {label}: {c.first} ({fmt(c.mean_first)}) vs {c.second} "
        f"({fmt(c.mean_second)})"
    )
    if c.p_value is None:
        return f"{head}: cannot tell, fewer than 2 seeds in common."
    test = f"paired t-test over {c.n_pairs} seeds, p = {c.p_value:.3g}"
    if c.p_value < c.alpha:
        return f"{head}: differ beyond run-to-run spread ({test}, below the level {c.alpha:.3g})."
    return f"{head}: no difference beyond run-to-run spread ({test}; the level is {c.alpha:.3g})."


def compare_neighbours(
    points: Sequence[SweepPointReport], metric: str = HEADLINE
) -> list[PointComparison]:
    """Neighbouring sweep points (of those run over seeds), site by site, on ``metric``: a
    paired t-test over the seeds both points ran, each held to ``1 - LEVEL`` divided by the
    number of comparisons (Bonferroni: the whole list holds at ``LEVEL``)."""
    with_runs = [p for p in points if p.replicates is not None]
    found = []
    for a, b in zip(with_runs, with_runs[1:]):
        assert a.replicates is not None and b.replicates is not None
        sites_b = {s.site_id: s for s in b.replicates.sites}
        for site_a in a.replicates.sites:
            site_b = sites_b.get(site_a.site_id)
            if site_b is None or metric not in site_a.numbers or metric not in site_b.numbers:
                continue
            by_seed_a = _by_seed(a.replicates, site_a.numbers[metric])
            by_seed_b = _by_seed(b.replicates, site_b.numbers[metric])
            common = [s for s in by_seed_a if s in by_seed_b]
            xs, ys = [by_seed_a[s] for s in common], [by_seed_b[s] for s in common]
            found.append(
                PointComparison(
                    site_id=site_a.site_id,
                    metric=metric,
                    first=a.label,
                    second=b.label,
                    n_pairs=len(common),
                    mean_first=site_a.numbers[metric].mean,
                    mean_second=site_b.numbers[metric].mean,
                    p_value=paired_p_value(xs, ys),
                    alpha=1 - LEVEL,
                )
            )
    # Bonferroni: each comparison's level is the list's, shared out.
    return [replace(c, alpha=(1 - LEVEL) / len(found)) for c in found]


def _by_seed(replicates: ReplicateReport, numbers: OverRuns) -> dict[int, float]:
    """A number's value per seed of the set (seeds without one left out)."""
    return {
        run.seed: value for run, value in zip(replicates.runs, numbers.values) if value is not None
    }
