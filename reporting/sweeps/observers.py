"""What each party can measure, per DP setting: the sweep's table and figure that set the
settings side by side by observer.

A DP setting is a choice of whom the consortium trusts. Per point and site the table holds
the accountants' epsilons with what each covers, then what each observer holds and what
the audits measured on it:

* the **server** (the aggregator's operator): each site's update, noised or not, or only
  each round's sum under secure aggregation; the white-box server level, the inversion
  audit and the update membership audit read what it really holds;
* **model users and other sites**: the released global model (PANORAMIA's two-sided
  eps_tilde, RM;RN, O(1));
* the **canary clients** (simulation only): a client-level estimate from the model too.

A measurement an observer's view does not allow is said so, never filled in.
"""

from __future__ import annotations

from collections.abc import Callable

from panoramia_fl.audit.result import Interval
from panoramia_fl.charts.svg import Axes, LegendEntry, Style, Text, render_figure

from ..layout.columns import DISHONEST_SERVER_HEADER, Column, SiteRow, column
from ..layout.inversion_report import inversion_cell
from ..numbers.formatting import (
    MISSING,
    fmt,
    fmt_dishonest_server,
    fmt_dp,
    fmt_est,
    fmt_two_sided,
    fmt_white_box,
)
from ..numbers.meanings import NOTES, Note
from ..numbers.metrics import (
    CLIENT_EPSILON,
    DP_EPSILON,
    EPS_TILDE_TWO_SIDED,
    O1,
    RM_RN_TWO_SIDED,
    Value,
    number,
    server,
)
from ..privacy.privacy_ledger import server_epsilon
from ..privacy.update_membership import (
    bounds_cell,
    peak_global,
    peak_update,
    update_cell,
    versus_cell,
)
from ..schemas.schema import SiteReport
from ..schemas.sweep_schema import SweepPointReport

SERVER_VIEWS: dict[str, str] = {
    "ideal": "each round's sum only (ideal secure aggregation)",
    "distributed": "each site's update with the site's noise share",
    "record": "each site's update, noised by its DP-SGD",
    "both": "each site's update, noised by its DP-SGD (client-level noise added after)",
    "client": "each site's update in the clear (the noise is added after)",
    "none": "each site's update in the clear",
}
"""What the server holds of a site in a round, by secure aggregation then DP level."""

NOT_SEEN = "not measured: the server holds only the sum"
"""A server-side reading of one site's update under secure aggregation."""

COVERS = {
    "record": "one record, against everyone (the server included)",
    "client": "the whole site, against model users and other sites (and the server only "
    "under distributed DP with secure aggregation)",
    "server": "one record, against the server itself",
}
"""What each accountant's epsilon in the table covers."""


def server_view(point: SweepPointReport) -> str:
    """What the server holds of each site's update at this point."""
    if point.secure_aggregation == "ideal":
        return SERVER_VIEWS["ideal"]
    return SERVER_VIEWS.get(point.dp_level or "none", MISSING)


def _point(row: SiteRow) -> SweepPointReport:
    assert row.point is not None, "an observer row names its point"
    return row.point


def _white_box_server(row: SiteRow) -> str:
    canaries = row.site.results.gradient_canaries
    if canaries is None:
        return "off (record-level DP only)"
    if _point(row).secure_aggregation == "ideal" and canaries.server is None:
        return NOT_SEEN
    return fmt_white_box(server(row.site))


def _inversion(row: SiteRow) -> str:
    text = inversion_cell(row.site, _point(row))
    if row.site.results.inversion and _point(row).secure_aggregation == "ideal":
        return f"{text} (on the round's sum)"
    return text


def _against_server(site: SiteReport) -> str:
    eps = server_epsilon(site.privacy)
    return "none" if eps is None else fmt(eps)


def _canary_clients(row: SiteRow) -> str:
    p = row.site.privacy
    if p.client_eps_estimate is None:
        return "off"
    return (
        f"{fmt(p.client_eps_estimate, 2)} [{fmt(p.client_eps_estimate_low, 2)}, "
        f"{fmt(p.client_eps_estimate_high, 2)}] / {fmt(p.client_eps_lb, 2)}"
    )


OBSERVER_COLUMNS: tuple[Column[SiteRow], ...] = (
    column("point", lambda r: _point(r).label, cls="text"),
    column("site", lambda r: str(r.site.site_id)),
    column("the server holds", lambda r: server_view(_point(r)), cls="text"),
    column("accuracy (global)", lambda r: fmt(r.global_accuracy)),
    column(
        f"accountant eps, record level ({COVERS['record']})",
        lambda r: fmt_dp(DP_EPSILON.value(r.site)),
    ),
    column(
        f"accountant eps, client level ({COVERS['client']})",
        lambda r: fmt_dp(CLIENT_EPSILON.value(r.site)),
    ),
    column(f"eps of {COVERS['server']}", lambda r: _against_server(r.site)),
    column("server: white-box server level, f-DP eps_lb / estimate [95% CI]", _white_box_server),
    column("server: inversion, first attacked round (baseline)", _inversion, cls="text"),
    column(
        f"server, not playing fair: {DISHONEST_SERVER_HEADER}",
        lambda r: fmt_dishonest_server(r.site.results.dishonest_server),
        cls="text",
    ),
    column(
        "server: the site's update, largest two-sided eps_tilde [95% CI] (its round)",
        lambda r: update_cell(r.site, _point(r)),
        cls="text",
    ),
    column(
        "model users, same round: global model's two-sided eps_tilde [95% CI]; update vs it",
        lambda r: versus_cell(r.site, _point(r)),
        cls="text",
    ),
    column(
        "server: that update's RM;RN two-sided / O(1) [95% CI] (the guarantee against the "
        "server that covers it)",
        lambda r: bounds_cell(r.site, _point(r)),
        cls="text",
    ),
    column("model users: eps_tilde two-sided [95% CI] (side)", lambda r: fmt_two_sided(r.site)),
    column(
        "model users: RM;RN two-sided / O(1) [95% CI]",
        lambda r: f"{fmt_est(RM_RN_TWO_SIDED.get(r.site))} / {fmt_est(O1.get(r.site))}",
    ),
    column("canary clients: client eps estimate [95% CI] / lower bound", _canary_clients),
)
"""The sweep's "What each party can measure" table: one row per point and site."""

OBSERVERS_NOTE = (
    "Each row is one site at one point. The accountants' epsilons say what each guarantee "
    "covers; the rest is measured, grouped by who could measure it. The server's readings "
    "are taken on what it holds at that point: one site's update, or only the round's sum "
    "under secure aggregation, where a reading of one site's update is not measured. Model "
    "users (and other sites) hold the released global model at every point. Does the server "
    "learn more about a site's records than a model user? Each site audits the updates it "
    "sent (audit.updates) with the same games as the global model of the same round: the "
    "update columns give the round whose update reads the largest two-sided eps_tilde, that "
    "round's global model beside it, the rounds whose update lies above its global model "
    "(intervals apart), and the update's lower bounds (RM;RN, O(1)), which may not exceed "
    "the site's DP-SGD epsilon after that round. Under secure aggregation the server holds "
    f"no update, only each round's sum: the round's global model. {NOTES[Note.ONE_MODEL_INTERVAL]}."
)


def observer_rows(points: list[SweepPointReport]) -> list[SiteRow]:
    """One row per point and site, in the sweep's order."""
    return [SiteRow(s, p.global_accuracy, p) for p in points for s in p.sites]


Reading = tuple[str, Callable[[SiteReport], Value], Style]
"""(name, a site's number or estimate (drawn with its interval), its marker's style)."""

_READINGS: tuple[Reading, ...] = (
    ("accountant eps, record level", DP_EPSILON.value, Style("#1f77b4", marker="s")),
    ("accountant eps, client level (site)", CLIENT_EPSILON.value, Style("#ff7f0e", marker="o")),
    (
        "eps of a record against the server",
        lambda s: server_epsilon(s.privacy),
        Style("#2ca02c", marker="^"),
    ),
)


def _inversion_gap(site: SiteReport) -> float | None:
    """The first attacked round's mean quality above its public-record baseline."""
    if not site.results.inversion:
        return None
    first = site.results.inversion[0]
    return first.quality_mean - first.baseline_quality_mean


def _white_box_estimate(site: SiteReport) -> float | None:
    level = server(site)
    return None if level is None else level.eps_estimate


_UPDATES: tuple[Reading, ...] = (
    ("the site's update (its peak round, 95% CI)", peak_update, Style("#8c564b", marker="D")),
    (
        "the global model of that round (95% CI)",
        peak_global,
        Style("#7f7f7f", marker="o", filled=False),
    ),
)
"""The update membership audit: what the server learns beside a model user."""

_PANELS: tuple[tuple[str, str, tuple[Reading, ...]], ...] = (
    ("accuracy", "global accuracy", ()),
    ("the accountants", "epsilon (log)", _READINGS),
    (
        "the server",
        "inversion: quality above baseline",
        (("inversion (first round)", _inversion_gap, Style("#d62728", marker="D")),),
    ),
    (
        "the server",
        "white-box server-level estimate (eps)",
        (("white-box server estimate", _white_box_estimate, Style("#17becf", marker="s")),),
    ),
    ("the server: the sites' updates", "eps_tilde two-sided (peak round)", _UPDATES),
    (
        "model users",
        "eps_tilde two-sided / O(1)",
        (
            ("eps_tilde two-sided (95% CI)", EPS_TILDE_TWO_SIDED.get, Style("#800000", marker="D")),
            ("O(1) (95% CI)", O1.get, Style("#9467bd", marker="^")),
        ),
    ),
)


def observers_plot(points: list[SweepPointReport]) -> str | None:
    """One panel per observer's reading, the points side by side, one marker per site."""
    if not any(p.sites for p in points):
        return None
    ticks = [(float(x), p.label) for x, p in enumerate(points)]
    xlim = (-0.6, len(points) - 0.4)
    panels, legend = [], []
    for who, ylabel, readings in _PANELS:
        ax = Axes(title=who, xlabel="sweep point", ylabel=ylabel, xlim=xlim, xticks=ticks)
        if not readings:
            ax.ylim = (0.0, 1.0)
            for x, p in enumerate(points):
                if p.global_accuracy is not None:
                    ax.point(x, p.global_accuracy, Style("#444444", marker="s"))
        for j, (name, value, style) in enumerate(readings):
            # A site's readings side by side in its slot.
            drawn = _draw(ax, points, value, style, shift=0.3 * (j - (len(readings) - 1) / 2))
            if drawn:
                legend.append(LegendEntry(name, style, "marker"))
        if readings is _UPDATES and ax.points:
            _say_unread(ax, points)
        if ax.points:
            ax.ylog = who == "the accountants"
            panels.append(ax)
    if len(panels) <= 1:
        return None
    return render_figure(
        panels,
        panel_width=max(300.0, 70.0 * len(points) + 120.0),
        panel_height=280.0,
        cols=min(3, len(panels)),
        legend=legend,
        title="What each party can measure: one marker per site (sites side by side)",
    )


def _say_unread(ax: Axes, points: list[SweepPointReport]) -> None:
    """Name why a point has no update marker: the server held only the sum, or the audit
    did not run."""
    for x, p in enumerate(points):
        if not any(s.updates for s in p.sites):
            why = "sum only" if p.secure_aggregation == "ideal" else "not run"
            ax.texts.append(Text(x, 0.0, why, "#555555", size=8, dy=4))


def _draw(
    ax: Axes,
    points: list[SweepPointReport],
    value: Callable[[SiteReport], Value],
    style: Style,
    shift: float = 0.0,
) -> bool:
    """The number of each site at each point (an estimate with its interval), sites spread
    around the point and each reading ``shift`` of a site's slot aside; drawn?"""
    drawn = False
    for x, p in enumerate(points):
        n = len(p.sites)
        for k, site in enumerate(p.sites):
            got = value(site)
            v = number(got)
            if v is None or (ax.title == "the accountants" and v <= 0):
                continue
            at = x + 0.5 * (k - (n - 1) / 2 + shift) / max(n, 1)
            if isinstance(got, Interval):
                ax.point(at, v, style, low=got.low, high=got.high)
            else:
                ax.point(at, v, style)
            drawn = True
    return drawn
