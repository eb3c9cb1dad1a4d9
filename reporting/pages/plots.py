"""Report plots as inline SVG markup (:mod:`charts.svg`), drawn in milliseconds each.

Each function returns None when it has nothing to draw, so the HTML can say so instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from panoramia_fl.audit.panoramia.over_rounds import RoundLeakage
from panoramia_fl.audit.result import Interval, RocSummary
from panoramia_fl.charts.svg import Axes, Bar, LegendEntry, Marker, Style, Text, render_figure
from panoramia_fl.contracts.run_log import RoundRecord, site_order

from ..numbers.metrics import (
    EPS_TILDE,
    EPS_TILDE_TWO_SIDED,
    O1,
    RM_RN,
    Value,
    round_o1,
)
from ..schemas.schema import SCORERS, SiteReport, UpdateRow, mean_of

_BASELINE = "#1f77b4"
_MIA = "#d62728"
_TWO_SIDED = "#800000"
_RMRN = "#2ca02c"
_O1 = "#9467bd"
_INPUT_CANARY = "#ff7f0e"
_WHITE_BOX = "#1f77b4"
_SERVER = "#17becf"
_GREY = "#666666"
_TAB10 = "#1f77b4 #ff7f0e #2ca02c #d62728 #9467bd #8c564b #e377c2 #7f7f7f #bcbd22 #17becf"
_CYCLE = _TAB10.split()
"""One colour per site in the training panels (matplotlib's tab10)."""
_DOTTED = "2 3"
_DASHED = "6 3"

Series = tuple[Callable[[SiteReport], Value], str, Marker, str]
"""(a site's number or estimate (a :data:`~.metrics.METRICS` getter), colour, marker,
legend) of a measurement drawn per site."""

_EPS_SERIES: tuple[Series, ...] = (
    (EPS_TILDE.get, _MIA, "o", "eps_tilde one-sided (95% CI)"),
    (EPS_TILDE_TWO_SIDED.get, _TWO_SIDED, "D", "eps_tilde two-sided (95% CI)"),
    (RM_RN.get, _RMRN, "s", "RM;RN eps lower bound"),
    (O1.get, _O1, "^", "O(1) eps lower bound"),
)

_SCORER_STYLE: dict[str, tuple[str, str]] = {
    "baseline": (_BASELINE, "baseline b"),
    "mia": (_MIA, "MIA"),
    "rm_rn": (_RMRN, "RM;RN (real non-members)"),
}

_FPR_MIN = 1e-3
_GRID_PANEL = (320.0, 270.0)
"""Width and height in pixels of each site's panel in the precision/bound-recall grids."""
_MIN_GRID_WIDTH = 450.0
"""A one-site grid is widened to this, so that its title has room."""


def _svg(panels: list[Axes], *, size: tuple[float, float], **kw: Any) -> str:
    """The figure's markup (one place, so that tests can look at the panels instead)."""
    return render_figure(panels, panel_width=size[0], panel_height=size[1], **kw)


def _nan(values: Any) -> list[float]:
    return [math.nan if v is None else float(v) for v in values]


def _cols(n: int, most: int) -> int:
    return max(1, min(most, n))


def site_eps_plot(sites: list[SiteReport]) -> str | None:
    """eps_tilde (one- and two-sided) per site with intervals, RM;RN and O(1), headroom bar."""
    if not sites:
        return None
    ax = Axes(
        title="eps_tilde per site (a lower bound on eps only where c_lb is tight)",
        xlabel="site",
        ylabel="epsilon (nats)",
        xlim=(-0.6, len(sites) - 0.4),
        xticks=[(x, f"site {s.site_id}") for x, s in enumerate(sites)],
    )
    width = 0.18
    offsets = [width * (j - (len(_EPS_SERIES) - 1) / 2) for j in range(len(_EPS_SERIES))]
    for x, site in enumerate(sites):
        if site.panoramia is None:
            ax.texts.append(Text(x, 0.0, site.status, "grey", size=10, vertical=True))
            continue
        game = site.panoramia.one_sided
        if game.headroom is not None:
            ax.bars.append(Bar(x, game.headroom, 0.8, "#e6e6e6", "#999999"))
        for dx, series in zip(offsets, _EPS_SERIES):
            _errpoint(ax, x + dx, site, series)
        if game.flags.saturated or game.flags.c_lb_not_tight:
            label = "saturated" if game.flags.saturated else "not tight"
            y = mean_of(game.eps_tilde) or 0.0
            ax.texts.append(Text(x + offsets[0], y, label, "darkorange", size=9, dy=10))
    ax.hlines.append((0.0, Style("#808080", width=0.8)))
    ax.legend = [
        *_legend(_EPS_SERIES),
        LegendEntry("headroom: ceiling - c_lb", Style("#999999"), "patch", fill="#e6e6e6"),
    ]
    # Beside the plot: inside, it would cover the first sites' bars.
    ax.legend_loc = "outside right"
    return _svg([ax], size=(max(640.0, 60.0 * len(sites) + 450.0), 360.0))


def _legend(series: tuple[Series, ...]) -> list[LegendEntry]:
    return [
        LegendEntry(label, Style(color, marker=shape), "marker")
        for _, color, shape, label in series
    ]


def _identity(ax: Axes, lo: float, hi: float, style: Style) -> None:
    """The line y = x from ``lo`` to ``hi``, traced point by point: on a log x-axis a straight
    segment between its ends is not y = x."""
    xs = [lo * (hi / lo) ** (i / 64) for i in range(65)]
    ax.plot(xs, xs, style)


def _errpoint(ax: Axes, x: float, site: SiteReport, series: Series) -> None:
    """The series' marker for the site at ``x``, with the estimate's interval."""
    of, color, shape, _ = series
    iv = of(site)
    value = mean_of(iv) if isinstance(iv, Interval) else iv
    if value is None:
        return
    low = high = None
    if isinstance(iv, Interval) and math.isfinite(iv.low) and math.isfinite(iv.high):
        # An interval that does not hold its own point is drawn from the point (as matplotlib
        # clipped negative error-bar lengths to 0).
        low, high = min(value, iv.low), max(value, iv.high)
    ax.point(x, value, Style(color, marker=shape), low=low, high=high)


def roc_plot(site_id: int, roc: dict[str, RocSummary], n_repeats: int) -> str | None:
    """Log-log ROC of one site (mean over ``n_repeats``): b, the MIA and RM;RN (when present)
    against chance."""
    drawn = [(name, roc[name]) for name in SCORERS if name in roc]
    if not drawn:
        return None
    ax = Axes(
        title=f"site {site_id}: ROC, log-log (mean of {n_repeats} repeat{'s' * (n_repeats != 1)})",
        xlabel="false-positive rate (fraction of non-members flagged, log scale)",
        ylabel="true-positive rate (fraction of members flagged, log scale)",
        xlog=True,
        ylog=True,
        legend_loc="lower right",
    )
    floor = _FPR_MIN
    for name, summary in drawn:
        color, label = _SCORER_STYLE[name]
        # A TPR of 0 (no member found at that FPR) has no place on a log axis.
        tpr = [v if v is not None and v > 0 else math.nan for v in summary.tpr]
        floor = min([floor, *(v for v in tpr if v > 0)])
        ax.plot(_nan(summary.fpr), tpr, Style(color), f"{label}, AUC {summary.auc:.3f}")
    ax.plot([_FPR_MIN, 1.0], [_FPR_MIN, 1.0], Style(_GREY, dash=_DOTTED), "chance (TPR = FPR)")
    ax.xlim = (_FPR_MIN, 1.0)
    ax.ylim = (floor, 1.05)
    return _svg([ax], size=(470.0, 420.0))


def _measured_ylim(ax: Axes) -> None:
    """Fit the y axis to what was measured (drawn so far), not to the accountant's eps:
    a y = x line up to eps 10^5 would flatten every bound onto 0."""
    ys = ax.data_y()
    ys = ys[[math.isfinite(y) for y in ys]]
    top = float(ys.max()) if ys.size else 0.0
    ax.ylim = (-0.05 * max(1.0, top), max(1.0, 1.25 * top))


def _eps_tick(t: float) -> str:
    return f"{t:.3g}" if t < 1000 else f"{t:.2g}"


def _curve_grid(
    sites: list[SiteReport],
    *,
    y_of: str,
    title: str,
    ylabel: str,
    ceiling_line: bool,
) -> str | None:
    drawn = [(s, s.panoramia) for s in sites if s.panoramia is not None and s.panoramia.repeats]
    if not drawn:
        return None
    panels = []
    ceiling = Style("black", width=1, dash=_DASHED)
    # One legend over the grid (the same in every panel, and over no curve).
    legend = [LegendEntry("baseline b", Style(_BASELINE)), LegendEntry("MIA", Style(_MIA))]
    for site, result in drawn:
        ax = Axes(
            title=f"site {site.site_id}",
            xlabel="recall (fraction of members found)",
            ylabel=ylabel,
        )
        opacity = 0.8 if len(result.repeats) == 1 else 0.55
        for rep in result.repeats:
            for curve, color in ((rep.baseline_curve, _BASELINE), (rep.mia_curve, _MIA)):
                ys = curve.precision if y_of == "precision" else curve.bound
                ax.plot(_nan(curve.recall), _nan(ys), Style(color, width=1.2, opacity=opacity))
        top = result.one_sided.ceiling
        if ceiling_line and top is not None:
            ax.hlines.append((top, ceiling))
        panels.append(ax)
    if ceiling_line and any(ax.hlines for ax in panels):
        legend.append(LegendEntry("ceiling", ceiling))
    cols = _cols(len(drawn), 4)
    width = max(_GRID_PANEL[0], _MIN_GRID_WIDTH / cols)
    return _svg(panels, size=(width, _GRID_PANEL[1]), cols=cols, title=title, legend=legend)


def precision_recall_plot(sites: list[SiteReport]) -> str | None:
    """Precision against recall of b and the MIA per site (one line per repeat)."""
    return _curve_grid(
        sites,
        y_of="precision",
        title="Precision-recall in the privacy game: baseline b vs MIA (one line per repeat)",
        ylabel="precision (fraction)",
        ceiling_line=False,
    )


def bound_recall_plot(sites: list[SiteReport]) -> str | None:
    """The lower bound (c_lb for b, {c+eps}_lb for the MIA) against recall, with the ceiling."""
    return _curve_grid(
        sites,
        y_of="bound",
        title="Lower bound against recall: c for b, c+eps for the MIA; dashed: ceiling",
        ylabel="lower bound (nats)",
        ceiling_line=True,
    )


def training_plot(rounds: list[RoundRecord]) -> str | None:
    """Global loss and accuracy per round, each site's train loss (when the sites sent it:
    not under record-level DP) and DP epsilon per round."""
    if not rounds:
        return None
    site_ids = sorted({sid for r in rounds for sid in r.sites}, key=site_order)
    has_dp = any(
        s.dp_epsilon is not None or s.dp_epsilon_client is not None
        for r in rounds
        for s in r.sites.values()
    )
    has_loss = any(s.train_loss is not None for r in rounds for s in r.sites.values())
    xs = [float(r.round) for r in rounds]
    # Whole rounds on the x axes while they are few enough to label each.
    round_ticks = [(x, f"{x:g}") for x in sorted(set(xs))] if len(set(xs)) <= 12 else None
    # Loss and accuracy side by side (matplotlib drew them on twin axes of one panel).
    loss = Axes(
        title="global model: loss", xlabel="round", ylabel="global loss (cross-entropy, nats)"
    )
    loss.plot(xs, _nan(r.global_loss for r in rounds), Style(_BASELINE, marker="o"))
    accuracy = Axes(
        title="global model: accuracy", xlabel="round", ylabel="global accuracy (fraction)"
    )
    accuracy.plot(xs, _nan(r.global_accuracy for r in rounds), Style(_INPUT_CANARY, marker="s"))
    train = Axes(title="site train loss", xlabel="round", ylabel="train loss (cross-entropy, nats)")
    dp = Axes(
        title="site DP epsilon (accountant, cumulative)", xlabel="round", ylabel="epsilon (nats)"
    )
    for i, sid in enumerate(site_ids):
        color = _CYCLE[i % len(_CYCLE)]
        pts = [(float(r.round), r.sites[sid]) for r in rounds if sid in r.sites]
        px = [p[0] for p in pts]
        train.plot(px, _nan(p[1].train_loss for p in pts), Style(color, marker="o"), f"site {sid}")
        if has_dp:
            record = _nan(p[1].dp_epsilon for p in pts)
            dp.plot(px, record, Style(color, marker="o"), f"site {sid}, record level")
            if any(p[1].dp_epsilon_client is not None for p in pts):
                client = _nan(p[1].dp_epsilon_client for p in pts)
                style = Style(color, dash=_DASHED, marker="s")
                dp.plot(px, client, style, f"site {sid}, client level (site-level)")
    # Legends only while they fit beside the lines.
    train.legend_loc = "upper right" if site_ids and len(site_ids) <= 12 else None
    dp.legend_loc = "upper left" if site_ids and len(site_ids) <= 6 else None
    panels = [loss, accuracy, *([train] if has_loss else []), *([dp] if has_dp else [])]
    for panel in panels:
        panel.xticks = round_ticks
    return _svg(panels, size=(300.0, 290.0), cols=len(panels))


def by_round_plot(by_round: list[RoundLeakage], *, title: str = "") -> str | None:
    """Two-sided eps_tilde (95% CI) and O(1) per audited round, beside global accuracy."""
    if not by_round:
        return None
    xs = [float(e.round) for e in by_round]
    ticks = [(x, f"{x:g}") for x in xs] if len(xs) <= 12 else None
    leak = Axes(title="leakage", xlabel="round", ylabel="epsilon (nats)", xticks=ticks)
    leak.plot(xs, [e.eps_tilde_two_sided.mean for e in by_round], Style(_TWO_SIDED))
    for x, e in zip(xs, by_round):
        iv = e.eps_tilde_two_sided
        leak.point(x, iv.mean, Style(_TWO_SIDED, marker="D"), low=iv.low, high=iv.high)
    leak.plot(
        xs, _nan(mean_of(round_o1(e)) for e in by_round), Style(_O1, marker="^", dash=_DASHED)
    )
    accuracy = Axes(
        title="global accuracy", xlabel="round", ylabel="accuracy (fraction)", xticks=ticks
    )
    accuracy.plot(xs, _nan(e.global_accuracy for e in by_round), Style(_INPUT_CANARY, marker="s"))
    legend = [
        LegendEntry("eps_tilde two-sided (95% CI)", Style(_TWO_SIDED, marker="D"), "marker"),
        LegendEntry("O(1) eps lower bound", Style(_O1, marker="^"), "marker"),
        LegendEntry("global accuracy", Style(_INPUT_CANARY, marker="s"), "marker"),
    ]
    return _svg([leak, accuracy], size=(320.0, 270.0), cols=2, title=title, legend=legend)


def updates_plot(rows: list[UpdateRow], *, title: str = "") -> str | None:
    """Two-sided eps_tilde (95% CI) of the site's update and of the global model per audited
    round, and RM;RN two-sided of each, beside the site's DP-SGD epsilon after the round."""
    if not rows:
        return None
    xs = [float(r.round) for r in rows]
    ticks = [(x, f"{x:g}") for x in xs] if len(xs) <= 12 else None
    leak = Axes(title="leakage", xlabel="round", ylabel="epsilon (nats)", xticks=ticks)
    series = (
        ("update", [r.update for r in rows], _TWO_SIDED, _RMRN, ""),
        ("global model", [r.global_model for r in rows], _GREY, _BASELINE, _DASHED),
    )
    legend = []
    for name, lines, color, rm_rn_color, dash in series:
        means = _nan(None if e is None else e.eps_tilde_two_sided.mean for e in lines)
        leak.plot(xs, means, Style(color, dash=dash or None))
        for x, e in zip(xs, lines):
            if e is not None:
                iv = e.eps_tilde_two_sided
                leak.point(x, iv.mean, Style(color, marker="D"), low=iv.low, high=iv.high)
        rm_rn = _nan(None if e is None else mean_of(e.rm_rn_eps_lb) for e in lines)
        leak.plot(xs, rm_rn, Style(rm_rn_color, marker="^", dash=_DOTTED))
        legend += [
            LegendEntry(
                f"{name}: eps_tilde two-sided (95% CI)", Style(color, marker="D"), "marker"
            ),
            LegendEntry(f"{name}: RM;RN two-sided", Style(rm_rn_color, marker="^"), "marker"),
        ]
    eps = _nan(r.update.dp_epsilon for r in rows)
    if any(math.isfinite(e) for e in eps):
        leak.plot(xs, eps, Style(_INPUT_CANARY, marker="s", dash=_DASHED))
        legend.append(LegendEntry("DP-SGD epsilon after the round", Style(_INPUT_CANARY), "line"))
    return _svg([leak], size=(420.0, 280.0), title=title, legend=legend)
