"""Report plots as base64 PNG strings (matplotlib Agg, imported lazily, no pyplot state).

Each function returns None when it has nothing to draw, so the HTML can say so instead.
"""

from __future__ import annotations

import base64
import io
import math
import textwrap
from typing import TYPE_CHECKING, Any

from audit.result import AuditResult, Curve, RocSummary

from .figure_cache import cached
from .schema import SCORERS, RoundReport, SiteReport, SweepPointReport, SweepSiteRow

if TYPE_CHECKING:
    from matplotlib.figure import Figure

_DPI = 90
_BASELINE = "tab:blue"
_MIA = "tab:red"
_TWO_SIDED = "maroon"
_RMRN = "tab:green"
_O1 = "tab:purple"
_CANARY = "tab:orange"

_EPS_SERIES: tuple[tuple[str, str, str, str], ...] = (
    ("eps_tilde", _MIA, "o", "eps_tilde one-sided (95% CI)"),
    ("eps_tilde_two_sided", _TWO_SIDED, "D", "eps_tilde two-sided (95% CI)"),
    ("rm_rn_eps_lb", _RMRN, "s", "RM;RN eps lower bound"),
    ("o1_eps_lb", _O1, "^", "O(1) eps lower bound"),
)
"""(field, colour, marker, legend) of each epsilon drawn per site; the field names are
shared by :class:`SiteReport` and :class:`SweepSiteRow`, with ``<field>_interval``."""

_SCORER_STYLE: dict[str, tuple[str, str]] = {
    "baseline": (_BASELINE, "baseline b"),
    "mia": (_MIA, "MIA"),
    "rm_rn": (_RMRN, "RM;RN (real non-members)"),
}

_FPR_MIN = 1e-3
_MIN_GRID_WIDTH = 5.0
_TITLE_CHARS_PER_INCH = 13


def _new_figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=_DPI, layout="tight")
    FigureCanvasAgg(fig)
    return fig


def _to_base64(fig: Figure) -> str:
    buf = io.BytesIO()
    # No date in the metadata: the same inputs give the same bytes.
    fig.savefig(buf, format="png", dpi=_DPI, metadata={"Software": None})
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _nan(values: list[float | None]) -> list[float]:
    return [math.nan if v is None else float(v) for v in values]


def _grid(n: int, *, ncols: int = 4) -> tuple[int, int]:
    cols = max(1, min(ncols, n))
    return math.ceil(n / cols), cols


@cached
def site_eps_plot(sites: list[SiteReport]) -> str | None:
    """eps_tilde (one- and two-sided) per site with intervals, RM;RN and O(1), headroom bar."""
    if not sites:
        return None
    fig = _new_figure(max(6.0, 1.0 * len(sites) + 2.5), 4.0)
    ax = fig.add_subplot()
    xs = list(range(len(sites)))
    width = 0.18
    for x, site in zip(xs, sites):
        if site.status != "ok":
            ax.text(x, 0.0, site.status, rotation=90, ha="center", va="bottom", color="grey")
            continue
        if site.headroom is not None:
            ax.bar(x, site.headroom, width=0.8, color="0.9", edgecolor="0.6", zorder=0)
        offsets = [width * (j - (len(_EPS_SERIES) - 1) / 2) for j in range(len(_EPS_SERIES))]
        _eps_points(ax, site, [x + dx for dx in offsets])
        if site.flags and (site.flags.saturated or site.flags.c_lb_not_tight):
            label = "saturated" if site.flags.saturated else "not tight"
            ax.annotate(
                label,
                (x + offsets[0], site.eps_tilde or 0.0),
                textcoords="offset points",
                xytext=(0, 8),
                ha="center",
                fontsize=7,
                color="darkorange",
            )
    from matplotlib.patches import Patch

    ax.legend(
        handles=[
            *_eps_legend(),
            Patch(facecolor="0.9", edgecolor="0.6", label="headroom: ceiling - c_lb"),
        ],
        fontsize=8,
        loc="upper left",
    )
    ax.set_xticks(xs, [f"site {s.site_id}" for s in sites])
    ax.set_xlabel("site")
    ax.set_ylabel("epsilon (nats)")
    ax.set_title("eps_tilde per site (a lower bound on eps only where c_lb is tight)")
    ax.axhline(0.0, color="0.5", lw=0.8)
    return _to_base64(fig)


def _eps_points(ax: Any, row: SiteReport | SweepSiteRow, xs: list[float]) -> None:
    """One marker (with its interval) per :data:`_EPS_SERIES` entry, at ``xs``."""
    for x, (name, color, marker, _) in zip(xs, _EPS_SERIES):
        _errpoint(ax, x, getattr(row, name), getattr(row, f"{name}_interval"), color, marker)


def _eps_legend() -> list[Any]:
    from matplotlib.lines import Line2D

    return [
        Line2D([], [], color=color, marker=marker, ls="", label=label)
        for _, color, marker, label in _EPS_SERIES
    ]


@cached
def roc_plot(site_id: int, roc: dict[str, RocSummary], n_repeats: int) -> str | None:
    """Log-log ROC of one site: b, the MIA and RM;RN (when present) against chance.

    Parameters
    ----------
    site_id
        Named in the title.
    roc
        The audit's mean ROC per scorer (``baseline``, ``mia``, ``rm_rn``).
    n_repeats
        Repeats the curves average over (named in the title).
    """
    drawn = [(name, roc[name]) for name in SCORERS if name in roc]
    if not drawn:
        return None
    fig = _new_figure(4.6, 4.0)
    ax = fig.add_subplot()
    floor = _FPR_MIN
    for name, summary in drawn:
        color, label = _SCORER_STYLE[name]
        # A TPR of 0 (no member found at that FPR) has no place on a log axis.
        tpr = [v if v is not None and v > 0 else math.nan for v in summary.tpr]
        floor = min([floor, *(v for v in tpr if v > 0)])
        ax.plot(
            _nan(summary.fpr), tpr, color=color, lw=1.5, label=f"{label}, AUC {summary.auc:.3f}"
        )
    ax.plot([_FPR_MIN, 1.0], [_FPR_MIN, 1.0], ls=":", color="0.4", label="chance (TPR = FPR)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(_FPR_MIN, 1.0)
    ax.set_ylim(floor, 1.05)
    ax.set_xlabel("false-positive rate (fraction of non-members flagged, log scale)", fontsize=8)
    ax.set_ylabel("true-positive rate (fraction of members flagged, log scale)", fontsize=8)
    ax.set_title(
        f"site {site_id}: ROC, log-log (mean of {n_repeats} repeat{'s' * (n_repeats != 1)})",
        fontsize=9,
    )
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="lower right")
    return _to_base64(fig)


def _errpoint(ax: Any, x: float, value: float | None, iv: Any, color: str, marker: str) -> None:
    if value is None:
        return
    yerr = None
    if iv is not None and iv.low is not None and iv.high is not None:
        yerr = [[max(0.0, value - iv.low)], [max(0.0, iv.high - value)]]
    ax.errorbar([x], [value], yerr=yerr, fmt=marker, color=color, capsize=3, ms=6)


def _measured_ylim(ax: Any) -> None:
    """Fit the y axis to what was measured (drawn so far), not to the accountant's eps:
    a y = x line up to eps 10^5 would flatten every bound onto 0."""
    top = ax.dataLim.y1 if ax.dataLim.height >= 0 and math.isfinite(ax.dataLim.y1) else 0.0
    ax.set_ylim(-0.05 * max(1.0, top), max(1.0, 1.25 * top))


def _eps_tick(t: float) -> str:
    return f"{t:.3g}" if t < 1000 else f"{t:.2g}"


def _curve_grid(
    sites: list[SiteReport],
    results: dict[int, AuditResult],
    *,
    y_of: str,
    title: str,
    ylabel: str,
    ceiling_line: bool,
) -> str | None:
    drawn = [s for s in sites if s.site_id in results and results[s.site_id].repeats]
    if not drawn:
        return None
    rows, cols = _grid(len(drawn))
    width = max(3.2 * cols, _MIN_GRID_WIDTH)
    fig = _new_figure(width, 2.7 * rows)
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax in axes.flat[len(drawn) :]:
        ax.set_visible(False)
    for ax, site in zip(axes.flat, drawn):
        result = results[site.site_id]
        for i, rep in enumerate(result.repeats):
            for curve, color, name in (
                (rep.baseline_curve, _BASELINE, "baseline b"),
                (rep.mia_curve, _MIA, "MIA"),
            ):
                ax.plot(
                    _nan(curve.recall),
                    _nan(_series(curve, y_of)),
                    color=color,
                    alpha=0.8 if len(result.repeats) == 1 else 0.55,
                    lw=1.2,
                    label=name if i == 0 else None,
                )
        if ceiling_line and site.ceiling is not None:
            ax.axhline(site.ceiling, color="black", ls="--", lw=1, label="ceiling")
        ax.set_title(f"site {site.site_id}", fontsize=9)
        ax.set_xlabel("recall (fraction of members found)", fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7)
    # Wrapped to the figure's width: a one-site grid is narrower than the title.
    fig.suptitle(textwrap.fill(title, int(_TITLE_CHARS_PER_INCH * width)), fontsize=10)
    return _to_base64(fig)


def _series(curve: Curve, y_of: str) -> list[float | None]:
    return list(curve.precision if y_of == "precision" else curve.bound)


@cached
def precision_recall_plot(sites: list[SiteReport], results: dict[int, AuditResult]) -> str | None:
    """Precision against recall of b and the MIA per site (one line per repeat)."""
    return _curve_grid(
        sites,
        results,
        y_of="precision",
        title="Precision-recall in the privacy game: baseline b vs MIA (one line per repeat)",
        ylabel="precision (fraction)",
        ceiling_line=False,
    )


@cached
def bound_recall_plot(sites: list[SiteReport], results: dict[int, AuditResult]) -> str | None:
    """The lower bound (c_lb for b, {c+eps}_lb for the MIA) against recall, with the ceiling."""
    return _curve_grid(
        sites,
        results,
        y_of="bound",
        title="Lower bound against recall: c for b, c+eps for the MIA; dashed: ceiling",
        ylabel="lower bound (nats)",
        ceiling_line=True,
    )


@cached
def training_plot(rounds: list[RoundReport]) -> str | None:
    """Global loss / accuracy per round, each site's train loss and DP epsilon per round."""
    if not rounds:
        return None
    site_ids = sorted({sid for r in rounds for sid in r.sites}, key=_sid_key)
    has_dp = any(
        s.dp_epsilon is not None or s.dp_epsilon_client is not None
        for r in rounds
        for s in r.sites.values()
    )
    fig = _new_figure(11.0, 3.2)
    axes = fig.subplots(1, 3 if has_dp else 2, squeeze=False)[0]
    xs = [r.round for r in rounds]
    ax = axes[0]
    ax.plot(xs, _nan([r.global_loss for r in rounds]), "o-", color="tab:blue", label="loss")
    ax.set_xlabel("round")
    ax.set_ylabel("global loss (cross-entropy, nats)", color="tab:blue")
    ax2 = ax.twinx()
    ax2.plot(xs, _nan([r.global_accuracy for r in rounds]), "s-", color="tab:orange")
    ax2.set_ylabel("global accuracy (fraction)", color="tab:orange")
    ax.set_title("global model", fontsize=9)
    for sid in site_ids:
        pts = [(r.round, r.sites[sid]) for r in rounds if sid in r.sites]
        axes[1].plot(
            [p[0] for p in pts],
            _nan([p[1].train_loss for p in pts]),
            "o-",
            ms=3,
            label=f"site {sid}",
        )
        if has_dp:
            line = axes[2].plot(
                [p[0] for p in pts],
                _nan([p[1].dp_epsilon for p in pts]),
                "o-",
                ms=3,
                label=f"site {sid}, record level",
            )[0]
            if any(p[1].dp_epsilon_client is not None for p in pts):
                axes[2].plot(
                    [p[0] for p in pts],
                    _nan([p[1].dp_epsilon_client for p in pts]),
                    "s--",
                    ms=3,
                    color=line.get_color(),
                    label=f"site {sid}, client level (site-level)",
                )
    axes[1].set_title("site train loss", fontsize=9)
    axes[1].set_xlabel("round")
    axes[1].set_ylabel("train loss (cross-entropy, nats)")
    if site_ids and len(site_ids) <= 12:
        axes[1].legend(fontsize=7)
    if has_dp:
        axes[2].set_title("site DP epsilon (accountant, cumulative)", fontsize=9)
        axes[2].set_xlabel("round")
        axes[2].set_ylabel("epsilon (nats)")
        if site_ids and len(site_ids) <= 6:
            axes[2].legend(fontsize=6)
    return _to_base64(fig)


def _sid_key(sid: str) -> tuple[int, Any]:
    try:
        return (0, int(sid))
    except ValueError:
        return (1, sid)


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


def _eps_axis(ax: Any, pos: dict[str, float], inf_x: float, log: bool) -> None:
    if log:
        ax.set_xscale("log")
    ticks = sorted(set(pos.values()))
    ax.set_xticks(ticks, ["inf (no DP)" if t == inf_x else _eps_tick(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("theoretical eps (DP accountant, nats; max over sites)")


def sweep_eps_plot(points: list[SweepPointReport]) -> str | None:
    """eps_tilde (one- and two-sided), RM;RN and O(1) per site against the theoretical eps."""
    pos, inf_x, log = _eps_positions(points)
    rows = [(p, s) for p in points if p.label in pos for s in p.sites if s.status == "ok"]
    if not rows:
        return None
    fig = _new_figure(7.5, 4.2)
    ax = fig.add_subplot()
    site_ids = sorted({s.site_id for _, s in rows})
    # Side by side around the point's x: one slot per (site, measurement).
    per_site = len(_EPS_SERIES)
    n_slots = per_site * len(site_ids)
    spread = 0.25 / n_slots if log else 0.12 * max(1.0, inf_x) / n_slots
    for p, s in rows:
        base = pos[p.label]
        ks = [per_site * site_ids.index(s.site_id) + j - (n_slots - 1) / 2 for j in range(per_site)]
        _eps_points(ax, s, [base * math.exp(spread * k) if log else base + spread * k for k in ks])
    finite = [x for x in pos.values() if x != inf_x]
    _measured_ylim(ax)
    if finite:
        lo, hi = min(finite), max(finite)
        ax.plot([lo, hi], [lo, hi], ls=":", color="0.4", lw=1)
    from matplotlib.lines import Line2D

    ax.legend(
        handles=[*_eps_legend(), Line2D([], [], color="0.4", ls=":", label="y = theoretical eps")],
        fontsize=8,
    )
    _eps_axis(ax, pos, inf_x, log)
    ax.set_ylabel("measured epsilon (nats; one marker per site)")
    ax.set_title("Measured leakage against the DP guarantee", fontsize=10)
    return _to_base64(fig)


def sweep_accuracy_plot(points: list[SweepPointReport]) -> str | None:
    """Final global accuracy of each point against its theoretical eps."""
    pos, inf_x, log = _eps_positions(points)
    drawn = [p for p in points if p.label in pos and p.global_accuracy is not None]
    if not drawn:
        return None
    fig = _new_figure(7.5, 3.8)
    ax = fig.add_subplot()
    for p in drawn:
        ax.plot([pos[p.label]], [p.global_accuracy], "o", color="tab:orange")
        ax.annotate(
            p.label,
            (pos[p.label], p.global_accuracy),
            textcoords="offset points",
            xytext=(4, 4),
            fontsize=7,
        )
    _eps_axis(ax, pos, inf_x, log)
    ax.set_ylabel("final global accuracy (fraction)")
    ax.set_title("Utility against privacy", fontsize=10)
    return _to_base64(fig)


_NO_DP = "no DP"


def _site_rows(
    points: list[SweepPointReport],
) -> dict[int, list[tuple[SweepPointReport, SweepSiteRow]]]:
    """Each site's rows over the points, by site id (sites without an audit included)."""
    by_site: dict[int, list[tuple[SweepPointReport, SweepSiteRow]]] = {}
    for p in points:
        for s in p.sites:
            by_site.setdefault(s.site_id, []).append((p, s))
    return dict(sorted(by_site.items()))


def _site_eps_positions(
    rows: list[tuple[SweepPointReport, SweepSiteRow]],
) -> tuple[dict[str, float], float, list[float]]:
    """x of each point for one site: its accountant eps; points without DP at the right end.

    Points with DP on but no accountant number are left out (nowhere honest to put them).
    """
    finite = sorted(
        {s.theoretical_eps for _, s in rows if s.theoretical_eps and s.theoretical_eps > 0}
    )
    no_dp_x = finite[-1] * 4 if finite else 1.0
    pos: dict[str, float] = {}
    for p, s in rows:
        if s.theoretical_eps is not None and s.theoretical_eps > 0:
            pos[p.label] = s.theoretical_eps
        elif s.theoretical_eps is None and p.private is False:
            pos[p.label] = no_dp_x
    return pos, no_dp_x, finite


def _site_eps_axis(ax: Any, pos: dict[str, float], no_dp_x: float, finite: list[float]) -> None:
    ax.set_xscale("log")
    ticks = sorted(set(pos.values()))
    ax.set_xticks(ticks, [_NO_DP if t == no_dp_x else _eps_tick(t) for t in ticks])
    ax.minorticks_off()
    if finite and no_dp_x in ticks:
        # The "no DP" slot is not on the epsilon scale: a rule sets it apart.
        ax.axvline(math.sqrt(finite[-1] * no_dp_x), color="0.75", ls="--", lw=0.8)
    lo, hi = min(ticks), max(ticks)
    ax.set_xlim(lo / 1.6, hi * 1.6)
    ax.set_xlabel("accountant eps (record-level guarantee, log scale)", fontsize=8)
    ax.tick_params(labelsize=7)


def _site_grid(
    points: list[SweepPointReport], *, title: str, draw: Any, legend: list[Any]
) -> str | None:
    """One panel per site; ``draw(ax, rows, pos)`` plots a site's points at ``pos``."""
    panels = []
    for sid, rows in _site_rows(points).items():
        pos, no_dp_x, finite = _site_eps_positions(rows)
        drawn = [(p, s) for p, s in rows if p.label in pos and s.status == "ok"]
        if drawn:
            panels.append((sid, drawn, pos, no_dp_x, finite))
    if not panels:
        return None
    n_rows, cols = _grid(len(panels), ncols=3)
    width = max(4.0 * cols, _MIN_GRID_WIDTH)
    fig = _new_figure(width, 3.3 * n_rows + 0.5)
    axes = fig.subplots(n_rows, cols, squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax, (sid, drawn, pos, no_dp_x, finite) in zip(axes.flat, panels):
        draw(ax, drawn, pos, finite)
        _site_eps_axis(ax, pos, no_dp_x, finite)
        ax.set_title(f"site {sid}", fontsize=9)
    axes.flat[0].legend(handles=legend, fontsize=7)
    fig.suptitle(textwrap.fill(title, int(_TITLE_CHARS_PER_INCH * width)), fontsize=10)
    return _to_base64(fig)


def sweep_site_accuracy_plot(points: list[SweepPointReport]) -> str | None:
    """Per site: accuracy (global and on the site's holdout) against its accountant eps."""
    from matplotlib.lines import Line2D

    def draw(ax: Any, rows: list[Any], pos: dict[str, float], finite: list[float]) -> None:
        for p, s in rows:
            x = pos[p.label]
            if s.global_accuracy is not None:
                ax.plot([x], [s.global_accuracy], "s", mfc="none", color=_BASELINE)
            if s.accuracy_holdout is not None:
                ax.plot([x], [s.accuracy_holdout], "o", color=_CANARY)
            y = s.accuracy_holdout if s.accuracy_holdout is not None else s.global_accuracy
            if y is not None:
                ax.annotate(p.label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=6)
        ax.set_ylabel("accuracy (fraction)", fontsize=8)

    return _site_grid(
        points,
        title="Utility against the DP guarantee, per site",
        draw=draw,
        legend=[
            Line2D([], [], color=_BASELINE, marker="s", mfc="none", ls="", label="global"),
            Line2D([], [], color=_CANARY, marker="o", ls="", label="site holdout"),
        ],
    )


_BOUND_SERIES: tuple[tuple[str, str, str, str], ...] = (
    ("canary_eps_lb", _CANARY, "*", "canary eps lower bound"),
    ("eps_tilde", _TWO_SIDED, "D", "eps_tilde, two-sided where measured (95% CI)"),
    ("o1_eps_lb", _O1, "^", "O(1) eps lower bound (95% CI)"),
)
"""(field, colour, marker, legend) of each measurement against the accountant's eps."""


def _bound_value(row: SweepSiteRow, name: str) -> tuple[float | None, Any]:
    """A measurement and its interval; eps_tilde is the two-sided one where there is one."""
    if name == "eps_tilde" and row.eps_tilde_two_sided is not None:
        return row.eps_tilde_two_sided, row.eps_tilde_two_sided_interval
    if name == "canary_eps_lb":
        return row.canary_eps_lb, None
    return getattr(row, name), getattr(row, f"{name}_interval")


def sweep_site_bounds_plot(points: list[SweepPointReport]) -> str | None:
    """Per site: the canary and O(1) lower bounds and eps_tilde against its accountant eps,
    with y = x (a lower bound above it is a violation)."""
    from matplotlib.lines import Line2D

    def draw(ax: Any, rows: list[Any], pos: dict[str, float], finite: list[float]) -> None:
        n = len(_BOUND_SERIES)
        for p, s in rows:
            for j, (name, color, marker, _) in enumerate(_BOUND_SERIES):
                value, iv = _bound_value(s, name)
                # Side by side around the point's x, evenly on the log axis.
                x = pos[p.label] * math.exp(0.08 * (j - (n - 1) / 2))
                _errpoint(ax, x, value, iv, color, marker)
        _measured_ylim(ax)
        if finite:
            lo, hi = finite[0] / 1.5, finite[-1] * 1.5
            ax.plot([lo, hi], [lo, hi], ls=":", color="0.3", lw=1)
        ax.axhline(0.0, color="0.6", lw=0.6)
        ax.set_ylabel("measured epsilon (nats)", fontsize=8)

    return _site_grid(
        points,
        title="How tight each audit is: measured epsilon against the DP guarantee, per site",
        draw=draw,
        legend=[
            *(
                Line2D([], [], color=color, marker=marker, ls="", label=label)
                for _, color, marker, label in _BOUND_SERIES
            ),
            Line2D([], [], color="0.3", ls=":", label="y = x (accountant eps)"),
        ],
    )
