"""Report plots as inline SVG markup (:mod:`charts.svg`), drawn in milliseconds each.

Each function returns None when it has nothing to draw, so the HTML can say so instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from audit.panoramia.over_rounds import RoundLeakage
from audit.result import Interval, RocSummary
from charts.svg import Axes, Bar, LegendEntry, Marker, Style, Text, render_figure
from contracts.run_log import RoundRecord, site_order

from .between_runs import ACCURACY, HEADLINE
from .metrics import (
    CANARY,
    EPS_TILDE,
    EPS_TILDE_TWO_SIDED,
    HOLDOUT_ACCURACY,
    MECHANISM_ESTIMATE,
    MECHANISM_FDP,
    O1,
    RM_RN,
    SERVER_FDP,
    Value,
    round_o1,
)
from .privacy_ledger import released_model_epsilon
from .schema import SCORERS, OverRuns, SiteReport, SweepPointReport, UpdateRow, mean_of

_BASELINE = "#1f77b4"
_MIA = "#d62728"
_TWO_SIDED = "#800000"
_RMRN = "#2ca02c"
_O1 = "#9467bd"
_CANARY = "#ff7f0e"
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
        if site.audit is None:
            ax.texts.append(Text(x, 0.0, site.status, "grey", size=10, vertical=True))
            continue
        game = site.audit.one_sided
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
    drawn = [(s, s.audit) for s in sites if s.audit is not None and s.audit.repeats]
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
    accuracy.plot(xs, _nan(r.global_accuracy for r in rounds), Style(_CANARY, marker="s"))
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
    accuracy.plot(xs, _nan(e.global_accuracy for e in by_round), Style(_CANARY, marker="s"))
    legend = [
        LegendEntry("eps_tilde two-sided (95% CI)", Style(_TWO_SIDED, marker="D"), "marker"),
        LegendEntry("O(1) eps lower bound", Style(_O1, marker="^"), "marker"),
        LegendEntry("global accuracy", Style(_CANARY, marker="s"), "marker"),
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
        leak.plot(xs, eps, Style(_CANARY, marker="s", dash=_DASHED))
        legend.append(LegendEntry("DP-SGD epsilon after the round", Style(_CANARY), "line"))
    return _svg([leak], size=(420.0, 280.0), title=title, legend=legend)


def _eps_positions(points: list[SweepPointReport]) -> tuple[dict[str, float], float, bool]:
    """x position of each point label; non-private points go to a separate "inf" slot."""
    finite = sorted({p.theoretical_eps for p in points if p.theoretical_eps is not None})
    log = bool(finite) and finite[0] > 0 and finite[-1] / finite[0] >= 8
    if not finite:
        inf_x = 1.0
    elif log:
        inf_x = finite[-1] * 4
    else:
        inf_x = finite[-1] + max(1.0, 0.3 * (finite[-1] - finite[0]))
    pos = {}
    for p in points:
        if p.theoretical_eps is not None:
            pos[p.label] = p.theoretical_eps
        elif p.private is not True:
            pos[p.label] = inf_x
    return pos, inf_x, log


def _eps_axis(ax: Axes, pos: dict[str, float], inf_x: float, log: bool) -> None:
    ax.xlog = log
    ticks = sorted(set(pos.values()))
    ax.xticks = [(t, "inf (no DP)" if t == inf_x else _eps_tick(t)) for t in ticks]
    ax.xlabel = "theoretical eps (DP accountant, nats; max over sites)"


def sweep_eps_plot(points: list[SweepPointReport]) -> str | None:
    """eps_tilde (one- and two-sided), RM;RN and O(1) per site against the theoretical eps."""
    pos, inf_x, log = _eps_positions(points)
    rows = [(p, s) for p in points if p.label in pos for s in p.sites if s.status == "ok"]
    if not rows:
        return None
    ax = Axes(
        title="Measured leakage against the DP guarantee",
        ylabel="measured epsilon (nats; one marker per site)",
        legend_loc="upper left",
    )
    site_ids = sorted({s.site_id for _, s in rows})
    # Side by side around the point's x: one slot per (site, measurement).
    per_site = len(_EPS_SERIES)
    n_slots = per_site * len(site_ids)
    spread = 0.25 / n_slots if log else 0.12 * max(1.0, inf_x) / n_slots
    for p, s in rows:
        base = pos[p.label]
        ks = [per_site * site_ids.index(s.site_id) + j - (n_slots - 1) / 2 for j in range(per_site)]
        for k, series in zip(ks, _EPS_SERIES):
            _errpoint(ax, base * math.exp(spread * k) if log else base + spread * k, s, series)
    finite = [x for x in pos.values() if x != inf_x]
    _measured_ylim(ax)
    diagonal = Style("#666666", width=1, dash=_DOTTED)
    if finite:
        _identity(ax, min(finite), max(finite), diagonal)
    ax.legend = [*_legend(_EPS_SERIES), LegendEntry("y = theoretical eps", diagonal)]
    _eps_axis(ax, pos, inf_x, log)
    return _svg([ax], size=(675.0, 380.0))


def sweep_accuracy_plot(points: list[SweepPointReport]) -> str | None:
    """Final global accuracy of each point against its theoretical eps."""
    pos, inf_x, log = _eps_positions(points)
    drawn = [p for p in points if p.label in pos and p.global_accuracy is not None]
    if not drawn:
        return None
    ax = Axes(title="Utility against privacy", ylabel="final global accuracy (fraction)")
    for p in drawn:
        assert p.global_accuracy is not None
        ax.point(pos[p.label], p.global_accuracy, Style(_CANARY, marker="o"))
        ax.texts.append(Text(pos[p.label], p.global_accuracy, p.label, "#222", dx=5, dy=5))
    _eps_axis(ax, pos, inf_x, log)
    return _svg([ax], size=(675.0, 340.0))


_NO_DP = "no DP"


def _site_rows(
    points: list[SweepPointReport],
) -> dict[int, list[tuple[SweepPointReport, SiteReport]]]:
    """Each site's rows over the points, by site id (sites without an audit included)."""
    by_site: dict[int, list[tuple[SweepPointReport, SiteReport]]] = {}
    for p in points:
        for s in p.sites:
            by_site.setdefault(s.site_id, []).append((p, s))
    return dict(sorted(by_site.items()))


def _site_eps_positions(
    rows: list[tuple[SweepPointReport, SiteReport]],
) -> tuple[dict[str, float], float, list[float]]:
    """x of each point for one site: its accountant eps; points without DP at the right end.

    Points with DP on but no accountant number are left out (nowhere honest to put them).
    """
    eps = [(p, released_model_epsilon(s.privacy)) for p, s in rows]
    finite = sorted({e for _, e in eps if e and e > 0})
    no_dp_x = finite[-1] * 4 if finite else 1.0
    pos: dict[str, float] = {}
    for p, e in eps:
        if e is not None and e > 0:
            pos[p.label] = e
        elif e is None and p.private is False:
            pos[p.label] = no_dp_x
    return pos, no_dp_x, finite


def _site_eps_axis(ax: Axes, pos: dict[str, float], no_dp_x: float, finite: list[float]) -> None:
    ax.xlog = True
    ticks = sorted(set(pos.values()))
    ax.xticks = [(t, _NO_DP if t == no_dp_x else _eps_tick(t)) for t in ticks]
    if finite and no_dp_x in ticks:
        # The "no DP" slot is not on the epsilon scale: a rule sets it apart.
        ax.vlines.append((math.sqrt(finite[-1] * no_dp_x), Style("#bfbfbf", 0.8, _DASHED)))
    lo, hi = min(ticks), max(ticks)
    ax.xlim = (lo / 1.6, hi * 1.6)
    ax.xlabel = "accountant eps (record-level guarantee, log scale)"


def _site_grid(
    points: list[SweepPointReport], *, title: str, draw: Any, legend: list[LegendEntry]
) -> str | None:
    """One panel per site; ``draw(ax, rows, pos, finite)`` plots a site's points at ``pos``."""
    panels = []
    for sid, rows in _site_rows(points).items():
        pos, no_dp_x, finite = _site_eps_positions(rows)
        drawn = [(p, s) for p, s in rows if p.label in pos and s.status == "ok"]
        if not drawn:
            continue
        ax = Axes(title=f"site {sid}")
        draw(ax, drawn, pos, finite)
        _site_eps_axis(ax, pos, no_dp_x, finite)
        panels.append(ax)
    if not panels:
        return None
    cols = _cols(len(panels), 3)
    width = max(360.0, _MIN_GRID_WIDTH / cols)
    return _svg(panels, size=(width, 300.0), cols=cols, title=title, legend=legend)


def sweep_site_accuracy_plot(points: list[SweepPointReport]) -> str | None:
    """Per site: accuracy (global and on the site's holdout) against its accountant eps."""
    global_style = Style(_BASELINE, marker="s", filled=False)
    holdout_style = Style(_CANARY, marker="o")

    def draw(ax: Axes, rows: list[Any], pos: dict[str, float], finite: list[float]) -> None:
        for p, s in rows:
            x = pos[p.label]
            holdout = HOLDOUT_ACCURACY.value(s)
            if p.global_accuracy is not None:
                ax.point(x, p.global_accuracy, global_style)
            if holdout is not None:
                ax.point(x, holdout, holdout_style)
            y = holdout if holdout is not None else p.global_accuracy
            if y is not None:
                ax.texts.append(Text(x, y, p.label, "#222", size=8, dx=5, dy=5))
        ax.ylabel = "accuracy (fraction)"

    return _site_grid(
        points,
        title="Utility against the DP guarantee, per site",
        draw=draw,
        legend=[
            LegendEntry("global", global_style, "marker"),
            LegendEntry("site holdout", holdout_style, "marker"),
        ],
    )


def sweep_site_inversion_plot(points: list[SweepPointReport]) -> str | None:
    """Per site: the gradient-inversion audit's mean quality (SSIM, or the share of fields
    recovered) of its first attacked round and its baseline's, against its accountant eps."""
    if not any(s.privacy.inversion for p in points for s in p.sites):
        return None
    attack_style = Style(_TWO_SIDED, marker="D")
    base_style = Style(_BASELINE, marker="o", filled=False)

    def draw(ax: Axes, rows: list[Any], pos: dict[str, float], finite: list[float]) -> None:
        for p, s in rows:
            if not s.privacy.inversion:
                continue
            first, x = s.privacy.inversion[0], pos[p.label]
            ax.point(x, first.quality_mean, attack_style)
            ax.point(x, first.baseline_quality_mean, base_style)
            ax.texts.append(Text(x, first.quality_mean, p.label, "#222", size=8, dx=5, dy=5))
        ax.ylabel = "reconstruction quality (fraction: SSIM, or fields right)"

    return _site_grid(
        points,
        title="Can the server rebuild the records? Inversion against the DP guarantee, per site",
        draw=draw,
        legend=[
            LegendEntry("attack on the site's update (mean)", attack_style, "marker"),
            LegendEntry("baseline: public records' update", base_style, "marker"),
        ],
    )


def _eps_tilde(site: SiteReport) -> Value:
    """eps_tilde, the two-sided one where there is one."""
    return EPS_TILDE_TWO_SIDED.get(site) or EPS_TILDE.get(site)


_BOUND_SERIES: tuple[Series, ...] = (
    (
        MECHANISM_FDP.get,
        _WHITE_BOX,
        "s",
        "white-box mechanism f-DP eps lower bound",
    ),
    (MECHANISM_ESTIMATE.get, _WHITE_BOX, "o", "white-box mechanism estimate (95% CI)"),
    (SERVER_FDP.get, _SERVER, "s", "white-box server f-DP bound"),
    (CANARY.get, _CANARY, "*", "canary eps lower bound"),
    (_eps_tilde, _TWO_SIDED, "D", "eps_tilde, two-sided where measured (95% CI)"),
    (O1.get, _O1, "^", "O(1) eps lower bound (95% CI)"),
)
"""The measurements drawn against the accountant's eps."""


def sweep_site_bounds_plot(points: list[SweepPointReport]) -> str | None:
    """Per site: the canary and O(1) lower bounds and eps_tilde against its accountant eps,
    with y = x (a lower bound above it is a violation)."""
    diagonal = Style("#4d4d4d", width=1, dash=_DOTTED)

    def draw(ax: Axes, rows: list[Any], pos: dict[str, float], finite: list[float]) -> None:
        n = len(_BOUND_SERIES)
        for p, s in rows:
            for j, series in enumerate(_BOUND_SERIES):
                # Side by side around the point's x, evenly on the log axis.
                _errpoint(ax, pos[p.label] * math.exp(0.08 * (j - (n - 1) / 2)), s, series)
        _measured_ylim(ax)
        if finite:
            _identity(ax, finite[0] / 1.5, finite[-1] * 1.5, diagonal)
        ax.hlines.append((0.0, Style("#999999", width=0.6)))
        ax.ylabel = "measured epsilon (nats)"

    return _site_grid(
        points,
        title="How tight each audit is: measured epsilon against the DP guarantee, per site",
        draw=draw,
        legend=[*_legend(_BOUND_SERIES), LegendEntry("y = x (accountant eps)", diagonal)],
    )


def sweep_replicates_plot(points: list[SweepPointReport]) -> str | None:
    """Per point run over seeds: each site's mean two-sided eps_tilde and the global
    accuracy, with error bars from the between-run 95% interval."""
    drawn = [(p.label, p.replicates) for p in points if p.replicates and p.replicates.sites]
    if not drawn:
        return None
    ticks = [(float(x), label) for x, (label, _) in enumerate(drawn)]
    xlim = (-0.6, len(drawn) - 0.4)
    eps = Axes(
        title="two-sided eps_tilde over training seeds",
        xlabel="sweep point",
        ylabel="eps_tilde (nats; mean over runs)",
        xlim=xlim,
        xticks=ticks,
    )
    accuracy = Axes(
        title="global accuracy over training seeds",
        xlabel="sweep point",
        ylabel="accuracy (fraction; mean over runs)",
        xlim=xlim,
        xticks=ticks,
    )
    site_ids = sorted({s.site_id for _, replicates in drawn for s in replicates.sites})
    width = 0.5 / max(1, len(site_ids))
    for x, (_, replicates) in enumerate(drawn):
        for s in replicates.sites:
            k = site_ids.index(s.site_id)
            style = Style(_CYCLE[k % len(_CYCLE)], marker="D")
            _between_runs_point(
                eps,
                x + width * (k - (len(site_ids) - 1) / 2),
                s.numbers.get(HEADLINE),
                style,
            )
        first = replicates.sites[0].numbers.get(ACCURACY)
        _between_runs_point(accuracy, x, first, Style(_CANARY, marker="s"))
    eps.hlines.append((0.0, Style("#808080", width=0.8)))
    legend = [
        LegendEntry(f"site {sid}", Style(_CYCLE[k % len(_CYCLE)], marker="D"), "marker")
        for k, sid in enumerate(site_ids)
    ]
    return _svg(
        [eps, accuracy],
        size=(max(360.0, 90.0 * len(drawn) + 160.0), 320.0),
        cols=2,
        legend=legend,
        title="Error bars: the between-run 95% interval (where another training run of the "
        "point's config would read)",
    )


def _between_runs_point(ax: Axes, x: float, numbers: OverRuns | None, style: Style) -> None:
    if numbers is None or numbers.mean is None:
        return
    ax.point(x, numbers.mean, style, low=numbers.low, high=numbers.high)
