"""The report's tables, each declared once as a tuple of columns that Markdown and HTML both
iterate: a column's header beside its cell, in one place.

A column may be Markdown-only or HTML-only, and an HTML cell may carry more than the text
(the unrounded value as its tooltip, badges). A field whose :class:`~.schema.FieldSpec` has
a ``label`` gets a column of its own in its dataclass's table (:func:`labelled_columns`), after
the declared ones: adding such a field to the schema adds the column.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from .formatting import (
    MISSING,
    SIDE_LABELS,
    flag_labels,
    fmt,
    fmt_best,
    fmt_canary,
    fmt_dp,
    fmt_fdp,
    fmt_interval,
    fmt_loss_gap,
    fmt_side_c_lb,
    fmt_theoretical_eps,
    fmt_two_sided,
    fmt_with_interval,
    ordering_text,
    scoped_flag_labels,
    scorer_cells,
    scorer_headers,
)
from .html_page import badge, esc, flag_badges, td
from .schema import (
    SIDES,
    LedgerRow,
    SiteReport,
    SweepPointReport,
    SweepSiteRow,
    field_spec,
)

Row = TypeVar("Row")


@dataclass(frozen=True)
class Column(Generic[Row]):
    """One column of a table."""

    header: str
    md: Callable[[Row], str] | None = None
    """The Markdown cell's text (the writer escapes it); None: not in the Markdown table."""
    html: Callable[[Row], str] | None = None
    """The HTML cell, a whole ``<td>``; None: not in the HTML table."""
    html_header: str | None = None
    """The HTML header where it differs from ``header``."""


def column(
    header: str,
    text: Callable[[Row], str],
    *,
    title: Callable[[Row], Any] | None = None,
    cls: str | None = None,
    md: bool = True,
    html: bool = True,
) -> Column[Row]:
    """A column whose cell reads ``text`` in both formats; in HTML with ``title`` (the
    unrounded value) as its tooltip and ``cls`` as its class."""

    def cell(row: Row) -> str:
        return td(text(row), title=None if title is None else title(row), cls=cls)

    return Column(header, md=text if md else None, html=cell if html else None)


def md_columns(columns: tuple[Column[Row], ...]) -> list[Column[Row]]:
    """The columns of the Markdown table."""
    return [c for c in columns if c.md is not None]


def html_columns(columns: tuple[Column[Row], ...]) -> list[Column[Row]]:
    """The columns of the HTML table."""
    return [c for c in columns if c.html is not None]


def md_headers(columns: tuple[Column[Row], ...]) -> list[str]:
    return [c.header for c in md_columns(columns)]


def md_cells(columns: tuple[Column[Row], ...], row: Row) -> list[str]:
    return [c.md(row) for c in md_columns(columns)]  # type: ignore[misc]


def html_headers(columns: tuple[Column[Row], ...]) -> list[str]:
    return [c.html_header or c.header for c in html_columns(columns)]


def html_cells(columns: tuple[Column[Row], ...], row: Row) -> str:
    return "".join(c.html(row) for c in html_columns(columns))  # type: ignore[misc]


def field_text(obj: Any, name: str, digits: int = 3) -> str:
    """A field's value for display; with its ``<name>_interval`` when it has one."""
    value = getattr(obj, name)
    interval = getattr(obj, f"{name}_interval", None)
    if interval is not None:
        return fmt_with_interval(value, interval, digits)
    if value is None or isinstance(value, bool | int | float):
        return fmt(value, digits)
    return str(value)


def labelled_columns(
    cls: type, of: Callable[[Any], Any] = lambda row: row
) -> tuple[Column[Any], ...]:
    """A column per field of ``cls`` with a ``label`` (header) in its spec, in field order;
    ``of`` picks the instance of ``cls`` from a table's row."""
    columns: list[Column[Any]] = []
    for f in dataclasses.fields(cls):
        spec = field_spec(f)
        if spec is None or spec.label is None:
            continue

        def text(row: Any, name: str = f.name, digits: int = spec.digits) -> str:
            return field_text(of(row), name, digits)

        def title(row: Any, name: str = f.name) -> Any:
            value = getattr(of(row), name)
            return value if isinstance(value, float) else None

        columns.append(column(spec.label, text, title=title))
    return tuple(columns)


# --- The consortium report's per-site table (report.md, report.html) -----------------


def _value(name: str) -> Callable[[Any], Any]:
    return lambda row: getattr(row, name)


def _number(name: str) -> Callable[[Any], str]:
    """An HTML cell: the field rounded, its unrounded value as the tooltip."""
    return lambda row: td(fmt(getattr(row, name)), title=getattr(row, name))


def _with_interval(name: str) -> Callable[[Any], str]:
    return lambda row: fmt_with_interval(getattr(row, name), getattr(row, f"{name}_interval"))


def _eps_tilde_cell(site: SiteReport) -> str:
    """eps_tilde with a badge per raised one-sided flag (and the status when not ok)."""
    badges = flag_badges(flag_labels(site.flags))
    if site.status != "ok":
        badges += badge(site.status, site.status)
    return td(esc(fmt(site.eps_tilde)) + badges, title=site.eps_tilde, raw=True)


def _two_sided_cell(site: SiteReport) -> str:
    """The two-sided eps_tilde with a badge per raised flag of each side."""
    two = site.two_sided
    side_badges = "".join(
        flag_badges(flag_labels(getattr(two, side).flags), prefix=f"{SIDE_LABELS[side]}: ")
        for side in (SIDES if two is not None else ())
    )
    return td(esc(fmt_two_sided(site)) + side_badges, title=site.eps_tilde_two_sided, raw=True)


def _dp_text(site: SiteReport) -> str:
    return fmt(site.dp_epsilon, 2) if site.dp_epsilon is not None else "off"


def _dp_cell(site: SiteReport) -> str:
    """DP eps with a badge per bound violation and for eps_tilde above it."""
    badges = "".join(badge(f"VIOLATION: {v.label}", "violation") for v in site.bound_violations)
    if site.eps_tilde_above_accountant:
        badges += badge("eps_tilde above (not a bound)", "above")
    return td(esc(_dp_text(site)) + badges, title=site.dp_epsilon, raw=True)


def _flags_md(site: SiteReport) -> str:
    """The raised flags per game, bold (Markdown)."""
    scoped = scoped_flag_labels(site)
    if not scoped:
        return MISSING
    return "; ".join(
        f"{scope}: " + ", ".join(f"**{label}**" for label in labels) for scope, labels in scoped
    )


def _side_c_lb(side: str) -> Callable[[SiteReport], str]:
    return lambda site: fmt_side_c_lb(site, side)


def _scorer(index: int) -> Callable[[SiteReport], str]:
    return lambda site: scorer_cells(site)[index]


SITE_COLUMNS: tuple[Column[SiteReport], ...] = (
    column("site", lambda s: str(s.site_id)),
    column("status", _value("status"), cls="text", md=False),
    column("n_members", lambda s: fmt(s.n_members)),
    Column("c_lb", md=_with_interval("c_lb"), html=_number("c_lb")),
    column("ceiling", lambda s: fmt(s.ceiling), title=_value("ceiling")),
    column("headroom", lambda s: fmt(s.headroom), title=_value("headroom"), md=False),
    Column("{c+eps}_lb", md=_with_interval("c_eps_lb"), html=_number("c_eps_lb")),
    Column(
        "eps_tilde [95% CI]",
        md=_with_interval("eps_tilde"),
        html=_eps_tilde_cell,
        html_header="eps_tilde",
    ),
    column("eps_tilde 95% CI", lambda s: fmt_interval(s.eps_tilde_interval), md=False),
    Column("eps_tilde two-sided [95% CI] (side)", md=fmt_two_sided, html=_two_sided_cell),
    *(column(f"{SIDE_LABELS[side]} side c_lb / ceiling", _side_c_lb(side)) for side in SIDES),
    column("RM;RN", _with_interval("rm_rn_eps_lb"), title=_value("rm_rn_eps_lb")),
    column(
        "RM;RN two-sided",
        _with_interval("rm_rn_eps_lb_two_sided"),
        title=_value("rm_rn_eps_lb_two_sided"),
    ),
    column("O(1)", _with_interval("o1_eps_lb"), title=_value("o1_eps_lb")),
    *(column(header, _scorer(i)) for i, header in enumerate(scorer_headers())),
    column("f loss members / holdout", fmt_loss_gap),
    Column("DP eps (record-level guarantee)", md=_dp_text, html=_dp_cell),
    *labelled_columns(SiteReport),
    column("generator", lambda s: s.generator_kind or MISSING, cls="text", md=False),
    column("flags", _flags_md, html=False),
    column("status", _value("status"), html=False),
)
"""The per-site table of report.md and report.html (each keeps its own columns)."""


# --- The privacy ledger (report.md, report.html) --------------------------------------


def _client_eps(row: LedgerRow) -> str:
    what = "; ".join(
        x
        for x in (
            row.client_accountant,
            row.client_sampling,
            row.client_neighboring_relation,
            None if row.client_rounds is None else f"{row.client_rounds} rounds",
        )
        if x
    )
    return fmt_dp(row.dp_epsilon_client, row.client_delta, what or None)


def _two_sided_ledger(row: LedgerRow) -> str:
    two = fmt(row.eps_tilde_two_sided)
    if row.two_sided_side is not None:
        two += f" ({SIDE_LABELS[row.two_sided_side]})"
    return two


LEDGER_COLUMNS: tuple[Column[LedgerRow], ...] = (
    column("site", lambda r: str(r.site_id)),
    column("DP level", lambda r: r.dp_level or MISSING, cls="text"),
    column(
        "record-level eps (accountant, delta)",
        lambda r: fmt_dp(r.dp_epsilon_record, r.record_delta, r.record_accountant),
    ),
    column(
        "client-level eps, site-level (accountant; sampling; neighbouring relation; delta)",
        _client_eps,
        cls="text",
    ),
    column(
        "client-level eps implied per record (vs. global-model readers, not the server)",
        lambda r: (
            fmt(r.dp_epsilon_client_record) if r.dp_epsilon_client_record is not None else "off"
        ),
    ),
    column(
        "DP eps for the site's records against the server (record-level only)",
        lambda r: fmt_dp(r.dp_epsilon, r.dp_delta),
    ),
    column(
        "canary_eps_lb [interval] (canaries)",
        lambda r: fmt_canary(r.canary_eps_lb, r.canary_eps_interval, r.canaries),
    ),
    column("eps_tilde one-sided", lambda r: fmt(r.eps_tilde)),
    column("eps_tilde two-sided (side)", _two_sided_ledger),
    column(
        "RM;RN one-sided / two-sided",
        lambda r: f"{fmt(r.rm_rn_eps_lb)} / {fmt(r.rm_rn_eps_lb_two_sided)}",
    ),
    column("O(1)", lambda r: fmt(r.o1_eps_lb)),
    column(
        "canary f-DP eps_lb (GDP mu, delta)",
        lambda r: fmt_fdp(r.canary_eps_lb_fdp, r.canary_fdp_mu, r.fdp_delta),
    ),
    column("O(1) f-DP (GDP mu)", lambda r: fmt_fdp(r.o1_eps_lb_fdp, r.o1_fdp_mu, None)),
    column(
        "best lower bound (method)",
        lambda r: fmt_best(r.best_eps_lb, r.best_eps_lb_method),
        cls="text",
    ),
    column(
        "accuracy global / site holdout",
        lambda r: f"{fmt(r.global_accuracy)} / {fmt(r.accuracy_holdout)}",
    ),
    column("f loss members / holdout", lambda r: f"{fmt(r.loss_members)} / {fmt(r.loss_holdout)}"),
    *labelled_columns(LedgerRow),
    column(
        "ordering check",
        lambda r: ordering_text(r.bound_violations, r.eps_tilde_above_accountant, r.dp_epsilon),
        cls="text",
    ),
)
"""The "Privacy ledger" table (md and html)."""


# --- The sweep's per point and site table (sweep.md, sweep.html) ----------------------


class PointSite(NamedTuple):
    """A row of the sweep's per-site table: a site of a point."""

    point: SweepPointReport
    site: SweepSiteRow


def _site_value(name: str) -> Callable[[PointSite], Any]:
    return lambda r: getattr(r.site, name)


def _off(value: float | None) -> str:
    return fmt(value) if value is not None else "off"


def _sweep_flag_labels(r: PointSite) -> list[str]:
    s = r.site
    labels = flag_labels(s.flags) + [f"VIOLATION: {v.label}" for v in s.bound_violations]
    if s.eps_tilde_above_accountant:
        labels.append("eps_tilde above DP eps (not a bound)")
    return labels


def _sweep_flags_cell(r: PointSite) -> str:
    s = r.site
    badges = flag_badges(flag_labels(s.flags))
    badges += "".join(badge(f"VIOLATION: {v.label}", "violation") for v in s.bound_violations)
    if s.eps_tilde_above_accountant:
        badges += badge("eps_tilde above DP eps (not a bound)", "above")
    if s.status != "ok":
        badges += badge(s.status, s.status)
        if s.error:
            badges += f' <span class="error">{esc(s.error)}</span>'
    return td(badges or MISSING, raw=True, cls="text")


def _titled(header: str, name: str, text: Callable[[Any], str] = fmt) -> Column[PointSite]:
    """A numeric column of a site field: rounded, its unrounded value as the tooltip."""
    return column(header, lambda r: text(getattr(r.site, name)), title=_site_value(name))


SWEEP_SITE_COLUMNS: tuple[Column[PointSite], ...] = (
    column("point", lambda r: r.point.label, cls="text"),
    column("site", lambda r: str(r.site.site_id)),
    column("status", lambda r: r.site.status, cls="text"),
    column(
        "theoretical eps",
        lambda r: fmt_theoretical_eps(r.site.theoretical_eps, r.point.private),
        title=_site_value("theoretical_eps"),
    ),
    _titled("accountant eps record", "dp_epsilon_record", _off),
    _titled("accountant eps client (site-level)", "dp_epsilon_client", _off),
    _titled("accuracy (global)", "global_accuracy"),
    _titled("accuracy (site holdout)", "accuracy_holdout"),
    _titled("canary_eps_lb", "canary_eps_lb"),
    _titled("eps_tilde", "eps_tilde"),
    column("eps_tilde 95% CI", lambda r: fmt_interval(r.site.eps_tilde_interval)),
    column(
        "eps_tilde two-sided [95% CI] (side)",
        lambda r: fmt_two_sided(r.site),
        title=_site_value("eps_tilde_two_sided"),
    ),
    _titled("c_lb", "c_lb"),
    _titled("ceiling", "ceiling"),
    _titled("RM;RN", "rm_rn_eps_lb"),
    _titled("RM;RN two-sided", "rm_rn_eps_lb_two_sided"),
    _titled("O(1)", "o1_eps_lb"),
    *labelled_columns(SweepSiteRow, of=lambda r: r.site),
    Column(
        "flags",
        md=lambda r: ", ".join(_sweep_flag_labels(r)) or MISSING,
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


def _overrides(p: SweepPointReport) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in p.overrides.items()) or MISSING


def _report_link(p: SweepPointReport) -> str:
    link = f'<a href="{esc(p.report_html)}">report.html</a>' if p.report_html else MISSING
    return td(link, raw=True, cls="text")


def _point_number(header: str, name: str) -> Column[SweepPointReport]:
    return column(header, lambda p: fmt(getattr(p, name)), title=_value(name))


POINT_COLUMNS: tuple[Column[SweepPointReport], ...] = (
    column("point", lambda p: p.label, cls="text"),
    column("overrides", _overrides, cls="text"),
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
        title=_value("theoretical_eps"),
    ),
    _point_number("global accuracy", "global_accuracy"),
    _point_number("max eps_tilde", "max_eps_tilde"),
    _point_number("max eps_tilde two-sided", "max_eps_tilde_two_sided"),
    column("rounds", lambda p: str(p.rounds_completed)),
    Column("report", html=_report_link),
)
"""The sweep's table of points (html and md; the link to each point's report: html)."""
