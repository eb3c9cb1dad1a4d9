"""A sweep's and a replicate set's figures (SVG, drawn as :mod:`.plots` draws a run's): eps
and accuracy per point, per site over the points, and the numbers between runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from panoramia_fl.charts.svg import Axes, LegendEntry, Style, Text

from ..layout.between_runs import ACCURACY, HEADLINE
from ..numbers.metrics import (
    EPS_TILDE,
    EPS_TILDE_TWO_SIDED,
    HOLDOUT_ACCURACY,
    INPUT_CANARY,
    MECHANISM_ESTIMATE,
    MECHANISM_FDP,
    O1,
    SERVER_FDP,
    Value,
)
from ..pages.plots import (
    _BASELINE,
    _CYCLE,
    _DASHED,
    _DOTTED,
    _EPS_SERIES,
    _INPUT_CANARY,
    _MIN_GRID_WIDTH,
    _O1,
    _SERVER,
    _TWO_SIDED,
    _WHITE_BOX,
    Series,
    _cols,
    _eps_tick,
    _errpoint,
    _identity,
    _legend,
    _measured_ylim,
    _svg,
)
from ..privacy.privacy_ledger import released_model_epsilon
from ..schemas.replicate_schema import OverRuns
from ..schemas.schema import SiteReport
from ..schemas.sweep_schema import SweepPointReport


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
        ax.point(pos[p.label], p.global_accuracy, Style(_INPUT_CANARY, marker="o"))
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
    points: list[SweepPointReport],
    *,
    title: str,
    draw: Any,
    legend: list[LegendEntry],
    has: Callable[[SiteReport], bool] = lambda site: True,
) -> str | None:
    """One panel per site with a result that ``has`` it; ``draw(ax, rows, pos, finite)``
    plots a site's points at ``pos``."""
    panels = []
    for sid, rows in _site_rows(points).items():
        pos, no_dp_x, finite = _site_eps_positions(rows)
        drawn = [(p, s) for p, s in rows if p.label in pos and s.status == "ok" and has(s)]
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
    holdout_style = Style(_INPUT_CANARY, marker="o")

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
    if not any(s.results.inversion for p in points for s in p.sites):
        return None
    attack_style = Style(_TWO_SIDED, marker="D")
    base_style = Style(_BASELINE, marker="o", filled=False)

    def draw(ax: Axes, rows: list[Any], pos: dict[str, float], finite: list[float]) -> None:
        for p, s in rows:
            first, x = s.results.inversion[0], pos[p.label]
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
        # Only the sites that ran the attack (audit.inversion.sites) get a panel.
        has=lambda site: bool(site.results.inversion),
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
    (INPUT_CANARY.get, _INPUT_CANARY, "*", "canary eps lower bound"),
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
        _between_runs_point(accuracy, x, first, Style(_INPUT_CANARY, marker="s"))
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
