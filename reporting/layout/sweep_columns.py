"""The sweep's and the replicate set's tables, declared as :mod:`.columns` declares the run's:
a sweep's points and sites, a replicate set's runs and its numbers over them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from panoramia_fl.contracts.run_files import REPORT_HTML

from ..numbers.formatting import (
    MISSING,
    fmt,
    fmt_dishonest_server,
    fmt_interval,
    fmt_theoretical_eps,
    fmt_two_sided,
)
from ..numbers.metrics import (
    C_LB,
    CEILING,
    CLIENT_EPSILON,
    DISHONEST_SERVER,
    DP_EPSILON,
    EPS_TILDE,
    HOLDOUT_ACCURACY,
    INPUT_CANARY,
    MECHANISM_ESTIMATE,
    MECHANISM_FDP,
    O1,
    RM_RN,
    RM_RN_TWO_SIDED,
    SERVER_FDP,
    Metric,
)
from ..pages.html_page import badge, esc, flag_badges, td
from ..privacy.privacy_ledger import released_model_epsilon
from ..schemas.replicate_schema import OverRuns, ReplicateRun, ReplicateSite
from ..schemas.sweep_schema import SweepPointReport
from .columns import (
    DISHONEST_SERVER_HEADER,
    Column,
    SiteRow,
    _check_badges,
    _one_flags,
    _titled,
    column,
)
from .inversion_report import inversion_cell


def _number(m: Metric, off: bool = False) -> Column[SiteRow]:
    """:func:`_titled` of a row's site's metric, under its label."""
    return _titled(m.label, lambda r: m.value(r.site), off, m.digits)


def _sweep_flags_cell(r: SiteRow) -> str:
    s = r.site
    badges = flag_badges(_one_flags(s))
    badges += "".join(badge(label, kind) for label, kind in _check_badges(s))
    if s.status != "ok":
        badges += badge(s.status, s.status)
        if s.error:
            badges += f' <span class="error">{esc(s.error)}</span>'
    return td(badges or MISSING, raw=True, cls="text")


def _point(r: SiteRow) -> SweepPointReport:
    assert r.point is not None, "a sweep row names its point"
    return r.point


SWEEP_SITE_COLUMNS: tuple[Column[SiteRow], ...] = (
    column("point", lambda r: _point(r).label, cls="text"),
    column("site", lambda r: str(r.site.site_id)),
    column("status", lambda r: r.site.status, cls="text"),
    column(
        "theoretical eps",
        lambda r: fmt_theoretical_eps(released_model_epsilon(r.site.privacy), _point(r).private),
        title=lambda r: released_model_epsilon(r.site.privacy),
    ),
    _number(DP_EPSILON, off=True),
    _number(CLIENT_EPSILON, off=True),
    _titled("accuracy (global)", lambda r: r.global_accuracy),
    *map(_number, (HOLDOUT_ACCURACY, INPUT_CANARY, MECHANISM_FDP, MECHANISM_ESTIMATE, SERVER_FDP)),
    column("inversion, first attacked round", lambda r: inversion_cell(r.site, _point(r))),
    column(
        DISHONEST_SERVER_HEADER,
        lambda r: fmt_dishonest_server(r.site.results.dishonest_server),
        title=lambda r: DISHONEST_SERVER.value(r.site),
    ),
    _number(EPS_TILDE),
    column("eps_tilde 95% CI", lambda r: fmt_interval(EPS_TILDE.get(r.site))),
    column("eps_tilde two-sided [95% CI] (side)", lambda r: fmt_two_sided(r.site)),
    *map(_number, (C_LB, CEILING, RM_RN, RM_RN_TWO_SIDED, O1)),
    Column(
        "flags",
        md=lambda r: (
            ", ".join(_one_flags(r.site) + [x for x, _ in _check_badges(r.site)]) or MISSING
        ),
        html=_sweep_flags_cell,
    ),
)
"""The sweep's per point and site table (html and md). "theoretical eps" is the
record-level guarantee that applies (the smaller of the record-level accountant's and the
one client-level DP implies)."""


def _point_status_cell(p: SweepPointReport) -> str:
    status = esc(p.status)
    if p.problems:
        status += "<br>" + "<br>".join(f'<span class="error">{esc(x)}</span>' for x in p.problems)
    return td(status, raw=True, cls="text")


def _report_link(p: SweepPointReport) -> str:
    link = f'<a href="{esc(p.report_html)}">{REPORT_HTML}</a>' if p.report_html else MISSING
    return td(link, raw=True, cls="text")


POINT_COLUMNS: tuple[Column[SweepPointReport], ...] = (
    column("point", lambda p: p.label, cls="text"),
    column(
        "overrides",
        lambda p: ", ".join(f"{k}={v!r}" for k, v in p.overrides.items()) or MISSING,
        cls="text",
    ),
    Column(
        "status",
        md=lambda p: p.status + "".join(f"; {x}" for x in p.problems),
        html=_point_status_cell,
    ),
    column("DP level", lambda p: p.dp_level or MISSING, cls="text"),
    column("canaries", lambda p: str(p.canaries) if p.canaries else "none"),
    column(
        "theoretical eps",
        lambda p: fmt_theoretical_eps(p.theoretical_eps, p.private),
        title=lambda p: p.theoretical_eps,
    ),
    _titled("global accuracy", lambda p: p.global_accuracy),
    _titled("max eps_tilde", lambda p: p.max_eps_tilde),
    _titled("max eps_tilde two-sided", lambda p: p.max_eps_tilde_two_sided),
    column("rounds", lambda p: str(p.rounds_completed)),
    Column("report", html=_report_link),
)
"""The sweep's table of points (html and md; the link to each point's report: html)."""


def _pair(low: float | None, high: float | None) -> str:
    return MISSING if low is None else f"[{fmt(low)}, {fmt(high)}]"


ReplicateRow = tuple[str, OverRuns]
"""A number's label and its values over a replicate set's runs."""


def replicate_columns(seeds: Sequence[int]) -> tuple[Column[ReplicateRow], ...]:
    """A site's numbers over a replicate set: the mean, the between-run interval, the mean's
    interval, the range, and each seed's own value."""
    return (
        column("number", lambda r: r[0], cls="text"),
        _titled("mean", lambda r: r[1].mean),
        column("between-run 95% interval", lambda r: _pair(r[1].low, r[1].high)),
        column("mean's 95% interval", lambda r: _pair(r[1].mean_low, r[1].mean_high)),
        column("range", lambda r: _pair(r[1].lowest, r[1].highest)),
        *(_titled(f"seed {seed}", _nth_value(i)) for i, seed in enumerate(seeds)),
    )


def _nth_value(i: int) -> Callable[[ReplicateRow], float | None]:
    return lambda r: r[1].values[i] if i < len(r[1].values) else None


REPLICATE_RUN_COLUMNS: tuple[Column[ReplicateRun], ...] = (
    column("seed", lambda r: str(r.seed)),
    column("run directory", lambda r: r.run_dir, cls="text"),
    column("status", lambda r: r.status + "".join(f"; {x}" for x in r.problems), cls="text"),
    column("CPU", lambda r: r.cpu or MISSING, cls="text"),
    Column(
        "report",
        html=lambda r: td(
            f'<a href="{esc(r.run_dir)}/{REPORT_HTML}">{REPORT_HTML}</a>', raw=True, cls="text"
        ),
    ),
)
"""A replicate set's runs."""


class PointSite(NamedTuple):
    """A site of a sweep point run over seeds."""

    point: SweepPointReport
    site: ReplicateSite


def _over(key: str, what: Callable[[OverRuns], str]) -> Callable[[PointSite], str]:
    return lambda r: what(r.site.numbers[key]) if key in r.site.numbers else MISSING


def sweep_replicate_columns(headline: str, accuracy: str) -> tuple[Column[PointSite], ...]:
    """Each point's sites over seeds: the ``headline`` number's and the ``accuracy``'s mean
    and between-run interval (keys of ``between_runs.pooled()``)."""
    return (
        column("point", lambda r: r.point.label, cls="text"),
        column("site", lambda r: str(r.site.site_id)),
        column("runs", _over(headline, lambda o: str(o.n))),
        column("eps_tilde two-sided: mean", _over(headline, lambda o: fmt(o.mean))),
        column("between-run 95% interval", _over(headline, lambda o: _pair(o.low, o.high))),
        column("range", _over(headline, lambda o: _pair(o.lowest, o.highest))),
        column("global accuracy: mean", _over(accuracy, lambda o: fmt(o.mean))),
        column("between-run 95% interval", _over(accuracy, lambda o: _pair(o.low, o.high))),
    )
