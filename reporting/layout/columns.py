"""Every table of the reports, each declared once as a tuple of columns that Markdown and HTML
both render (:func:`md_table`, :func:`html_table`): a column's header beside its cell.

A column may be Markdown-only or HTML-only, and an HTML cell may carry more than the text
(the unrounded value as its tooltip, badges).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from panoramia_fl.audit.panoramia.sides import SIDES

from ..numbers.formatting import (
    MISSING,
    SIDE_LABELS,
    flag_labels,
    fmt,
    fmt_best,
    fmt_conformance,
    fmt_dishonest_server,
    fmt_dp,
    fmt_est,
    fmt_fdp,
    fmt_input_canary,
    fmt_interval,
    fmt_loss_gap,
    fmt_outside,
    fmt_side_c_lb,
    fmt_two_sided,
    fmt_white_box,
    ordering_text,
    scoped_flag_labels,
    scorer_cells,
    scorer_headers,
)
from ..numbers.headline_flags import flag_effects
from ..numbers.meanings import NOTES, Note
from ..numbers.metrics import (
    C_EPS_LB,
    C_LB,
    CEILING,
    DISHONEST_SERVER,
    EPS_TILDE,
    HEADROOM,
    HOLDOUT_ACCURACY,
    INPUT_CANARY_FDP,
    O1,
    O1_FDP,
    RM_RN,
    RM_RN_TWO_SIDED,
    Metric,
    Value,
    mechanism,
    number,
    server,
    two_sided,
)
from ..pages.html_page import badge, esc, flag_badges, td
from ..privacy.privacy_ledger import released_model_epsilon, server_epsilon
from ..schemas.schema import SiteReport, mean_of
from ..schemas.sweep_schema import SweepPointReport

Row = TypeVar("Row")


@dataclass(frozen=True)
class Column(Generic[Row]):
    """One column of a table."""

    header: str
    md: Callable[[Row], str] | None = None
    """The Markdown cell's text (the writer escapes it); None: not in the Markdown table."""
    html: Callable[[Row], str] | None = None
    """The HTML cell, a whole ``<td>``; None: not in the HTML table."""
    fold: int = 0
    """Its group in a wide table's HTML (:func:`grouped`): 0 leads, the others are folded."""


def column(
    header: str,
    text: Callable[[Row], str],
    *,
    title: Callable[[Row], Any] | None = None,
    cls: str | None = None,
    md: bool = True,
    html: bool = True,
    fold: int = 0,
) -> Column[Row]:
    """A column whose cell reads ``text`` in both formats; in HTML with ``title`` (the
    unrounded value) as its tooltip and ``cls`` as its class."""

    def cell(row: Row) -> str:
        return td(text(row), title=None if title is None else title(row), cls=cls)

    return Column(header, md=text if md else None, html=cell if html else None, fold=fold)


def md_text(text: str) -> str:
    """Table-safe text: no newlines, escaped pipes, no raw HTML (renderers would run it)."""
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|")


def md_table(columns: Sequence[Column[Row]], rows: Iterable[Row]) -> list[str]:
    """The Markdown lines of a table."""
    cols = [(c.header, c.md) for c in columns if c.md is not None]
    return [
        "| " + " | ".join(md_text(h) for h, _ in cols) + " |",
        "|" + "|".join("---" for _ in cols) + "|",
        *["| " + " | ".join(md_text(cell(row)) for _, cell in cols) + " |" for row in rows],
    ]


def html_table(
    columns: Sequence[Column[Row]],
    rows: Iterable[Row],
    *,
    attrs: str = "",
    row_class: Callable[[Row], str | None] = lambda row: None,
    row_title: Callable[[Row], str | None] = lambda row: None,
) -> str:
    """The HTML of a table; ``attrs`` go on ``<table>`` (an id, a class)."""
    cols = [(c.header, c.html) for c in columns if c.html is not None]

    def tr(row: Row) -> str:
        cls, title = row_class(row), row_title(row)
        opened = "<tr" + (f' class="{esc(cls)}"' if cls else "")
        opened += (f' title="{esc(title)}"' if title else "") + ">"
        return opened + "".join(cell(row) for _, cell in cols) + "</tr>"

    body = "".join(tr(row) for row in rows)
    head = "<tr>" + "".join(f"<th>{esc(h)}</th>" for h, _ in cols) + "</tr>"
    return f"<table{attrs}>{head}{body}</table>"


def _estimate(header: str, get: Callable[[Row], Value], fold: int = 0) -> Column[Row]:
    """The estimate ``get`` gives as ``mean [low, high]``, the unrounded mean as the tooltip."""
    return column(header, lambda r: fmt_est(get(r)), title=lambda r: number(get(r)), fold=fold)


def _mean_only(m: Metric, fold: int = 0) -> Column[SiteReport]:
    """An estimate: ``mean [low, high]`` in Markdown, the mean alone in HTML (where a
    column of its own or the tooltip holds the rest)."""
    return Column(
        m.label,
        md=lambda s: fmt_est(m.get(s)),
        html=lambda s: td(fmt(m.value(s)), title=m.value(s)),
        fold=fold,
    )


def _titled(
    header: str,
    of: Callable[[Row], float | None],
    off: bool = False,
    digits: int = 3,
    fold: int = 0,
) -> Column[Row]:
    """A numeric column: rounded to ``digits``, its unrounded value as the tooltip; "off" for
    None when ``off``."""

    def text(r: Row) -> str:
        return "off" if off and of(r) is None else fmt(of(r), digits)

    return column(header, text, title=of, fold=fold)


def _eps_tilde_cell(site: SiteReport) -> str:
    """eps_tilde with a badge per raised one-sided flag (and the status when not ok)."""
    badges = flag_badges(_one_flags(site))
    if site.status != "ok":
        badges += badge(site.status, site.status)
    value = EPS_TILDE.value(site)
    return td(esc(fmt(value)) + badges, title=value, raw=True)


def _two_sided_cell(site: SiteReport, *, effects: bool = False) -> str:
    """The two-sided eps_tilde [interval] (side) with a badge per raised flag of the headline
    and of each side; ``effects``: and what the headline's flags mean for it."""
    two = two_sided(site)
    side_badges = "".join(
        flag_badges(flag_labels(getattr(two, side).flags), prefix=f"{SIDE_LABELS[side]}: ")
        for side in (SIDES if two is not None else ())
    )
    if two is not None and two.flags is not None:
        side_badges = flag_badges(flag_labels(two.flags), prefix="headline: ") + side_badges
    value = None if two is None else mean_of(two.eps_tilde)
    note = _effects(site) if effects else None
    side_badges += f'<div class="flag-note">{esc(note)}</div>' if note else ""
    return td(esc(fmt_two_sided(site)) + side_badges, title=value, raw=True)


def _effects(site: SiteReport) -> str | None:
    return None if site.panoramia is None else flag_effects(site.panoramia)


def _two_sided_effects_text(site: SiteReport) -> str:
    """The headline table's two-sided eps_tilde, with what its flags mean for it."""
    note = _effects(site)
    return fmt_two_sided(site) + (f"; {note}" if note else "")


def _dp_text(site: SiteReport) -> str:
    """The record-level guarantee that applies (:func:`released_model_epsilon`), saying when
    it is the one client-level DP implies."""
    eps = released_model_epsilon(site.privacy)
    if eps is None:
        return "off"
    record = site.privacy.dp_epsilon
    return fmt(eps, 2) + (" (implied by client-level DP)" if record is None or eps < record else "")


def _check_badges(site: SiteReport) -> list[tuple[str, str]]:
    """(label, badge kind) per bound violation and for eps_tilde above the guarantee."""
    found = [(f"VIOLATION: {v.label}", "violation") for v in site.checks.bound_violations]
    return found + [(NOTES[Note.ABOVE_LABEL], "above")] * bool(
        site.checks.eps_tilde_above_accountant
    )


def _dp_cell(site: SiteReport) -> str:
    badges = "".join(badge(label, kind) for label, kind in _check_badges(site))
    return td(esc(_dp_text(site)) + badges, title=released_model_epsilon(site.privacy), raw=True)


def _flags_md(site: SiteReport) -> str:
    """The raised flags per game, bold (Markdown)."""
    scoped = scoped_flag_labels(site)
    if not scoped:
        return MISSING
    return "; ".join(
        f"{scope}: " + ", ".join(f"**{label}**" for label in labels) for scope, labels in scoped
    )


def _side_c_lb(side: str) -> Callable[[SiteReport], str]:
    return lambda s: fmt_side_c_lb(s, side)


def _scorer(i: int) -> Callable[[SiteReport], str]:
    return lambda s: scorer_cells(s)[i]


def site_row_class(site: SiteReport) -> str:
    """A site's row colour (:data:`~.formatting.ROW_COLOURS`): its worst one-sided state."""
    flags = None if site.panoramia is None else site.panoramia.one_sided.flags
    if site.checks.bound_violations:
        return "violation"
    if site.status != "ok":
        return site.status
    if flags and flags.c_lb_not_tight:
        return "not-tight"
    return "saturated" if flags and flags.saturated else "ok"


_SITE: Column[SiteReport] = column("site", lambda s: str(s.site_id))
_TWO_SIDED = Column("eps_tilde two-sided [95% CI] (side)", md=fmt_two_sided, html=_two_sided_cell)
_DP = Column("DP eps (record-level guarantee)", md=_dp_text, html=_dp_cell)

HEADLINE_COLUMNS: tuple[Column[SiteReport], ...] = (
    _SITE,
    Column(
        _TWO_SIDED.header,
        md=_two_sided_effects_text,
        html=lambda s: _two_sided_cell(s, effects=True),
    ),
    _estimate("O(1) [95% CI]", O1.get),
    _DP,
    column("f accuracy members / holdout", lambda s: fmt_loss_gap(s, "accuracy")),
)
"""The headline: what a reader needs first, narrow enough for a 1280-px window."""


class ColumnGroup(NamedTuple, Generic[Row]):
    """Some of a wide table's columns, shown together in HTML: the first group leads, the
    others are folded under their title, each with the row's key column first."""

    title: str
    columns: tuple[Column[Row], ...]


def grouped(
    titles: tuple[str, ...], columns: tuple[Column[Row], ...]
) -> tuple[ColumnGroup[Row], ...]:
    """A wide table's HTML groups: each column under the title its :attr:`Column.fold`
    indexes, after the key column (the first), which leads every group."""
    key, *rest = columns
    return tuple(
        ColumnGroup(title, (key, *(c for c in rest if c.fold == i and c.html is not None)))
        for i, title in enumerate(titles)
    )


SITE_COLUMNS: tuple[Column[SiteReport], ...] = (
    _SITE,
    column("status", lambda s: s.status, cls="text", md=False),
    column("n_members", lambda s: fmt(s.n_members), fold=1),
    _mean_only(C_LB, fold=1),
    _titled("ceiling", CEILING.value, fold=1),
    column("headroom", lambda s: fmt(HEADROOM.value(s)), md=False, fold=1),
    _mean_only(C_EPS_LB, fold=1),
    Column("eps_tilde [95% CI]", lambda s: fmt_est(EPS_TILDE.get(s)), _eps_tilde_cell, fold=1),
    column("eps_tilde 95% CI", lambda s: fmt_interval(EPS_TILDE.get(s)), md=False, fold=1),
    _TWO_SIDED,
    *(column(f"{SIDE_LABELS[side]} side c_lb / ceiling", _side_c_lb(side)) for side in SIDES),
    _estimate(RM_RN.label, RM_RN.get, fold=1),
    _estimate(RM_RN_TWO_SIDED.label, RM_RN_TWO_SIDED.get),
    _estimate(O1.label, O1.get),
    *(column(h, _scorer(i), fold=2) for i, h in enumerate(scorer_headers())),
    column("f loss members / holdout", fmt_loss_gap, fold=2),
    _DP,
    column(
        "generator",
        lambda s: s.panoramia.generator_kind if s.panoramia else MISSING,
        cls="text",
        md=False,
        fold=2,
    ),
    column("flags", _flags_md, html=False),
    column("status", lambda s: s.status, html=False),
)
"""The per-site table of report.md (one table) and report.html (:data:`SITE_GROUPS`)."""

SITE_GROUPS = grouped(
    ("", "The paper's one-sided game", "Scorers, the model's loss, the generator"), SITE_COLUMNS
)
""":data:`SITE_COLUMNS` in report.html: the two-sided game against real non-members and the
guarantee first, the rest folded (each group narrow enough for a 1,400-px window)."""


DISHONEST_SERVER_HEADER = "dishonest server: share rebuilt (baseline), attack, round"
"""The column of what a dishonest server (``fl.adversary``) rebuilt, in every table that
sets the sites side by side."""


class SiteRow(NamedTuple):
    """A site in a table that needs more than the site: the run's global accuracy, and in a
    sweep the point it belongs to."""

    site: SiteReport
    global_accuracy: float | None
    point: SweepPointReport | None = None


def _client_canaries(row: SiteRow) -> str:
    p = row.site.privacy
    if p.client_eps_estimate is None:
        return MISSING
    return (
        f"{fmt(p.client_eps_estimate, 2)} [{fmt(p.client_eps_estimate_low, 2)}, "
        f"{fmt(p.client_eps_estimate_high, 2)}] / {fmt(p.client_eps_estimate_two_variance, 2)}"
        f" / {fmt(p.client_eps_lb, 2)}"
    )


def _client_eps(row: SiteRow) -> str:
    p = row.site.privacy
    what = "; ".join(
        x
        for x in (
            p.client_accountant,
            p.client_sampling,
            p.client_neighboring_relation,
            None if p.client_rounds is None else f"{p.client_rounds} rounds",
        )
        if x
    )
    return fmt_dp(p.client_epsilon, p.client_delta, what or None)


def _rm_rn_pair(row: SiteRow) -> str:
    one, two = (m.value(row.site) for m in (RM_RN, RM_RN_TWO_SIDED))
    return f"{fmt(one)} / {fmt(two)}"


LEDGER_COLUMNS: tuple[Column[SiteRow], ...] = (
    column("site", lambda r: str(r.site.site_id)),
    column(
        "record-level eps (accountant, delta)",
        lambda r: fmt_dp(
            r.site.privacy.dp_epsilon, r.site.privacy.dp_delta, r.site.privacy.record_accountant
        ),
    ),
    column(
        "client-level eps, site-level (accountant; sampling; neighbouring relation; delta)",
        _client_eps,
        cls="text",
        fold=1,
    ),
    column(
        "client-level eps implied per record (vs. global-model readers; the server only "
        "under distributed DP)",
        lambda r: (
            fmt(r.site.privacy.client_epsilon_record)
            if r.site.privacy.client_epsilon_record is not None
            else "off"
        ),
        fold=1,
    ),
    column(
        "canary clients' client-level eps: estimate [95% CI] / two-variance / lower bound",
        _client_canaries,
        fold=1,
    ),
    column(
        "DP eps for the site's records against the server (record level; distributed client level)",
        lambda r: fmt_dp(server_epsilon(r.site.privacy), r.site.privacy.dp_delta),
    ),
    column(
        "canary_eps_lb [interval] (canaries)",
        lambda r: fmt_input_canary(r.site.results.input_canaries, r.site.privacy.canaries),
        fold=1,
    ),
    column(
        "white-box mechanism: f-DP eps_lb / estimate [95% CI]",
        lambda r: fmt_white_box(mechanism(r.site)),
    ),
    column(
        "white-box server: f-DP eps_lb / estimate [95% CI]",
        lambda r: fmt_white_box(server(r.site)),
    ),
    column(
        DISHONEST_SERVER_HEADER,
        lambda r: fmt_dishonest_server(r.site.results.dishonest_server),
        title=lambda r: DISHONEST_SERVER.value(r.site),
        cls="text",
    ),
    column(
        "DP-SGD conformance (the real steps against the accountant)",
        lambda r: fmt_conformance(r.site.results.gradient_canaries),
        cls="text",
    ),
    column("eps_tilde one-sided", lambda r: fmt(EPS_TILDE.value(r.site)), fold=2),
    column("eps_tilde two-sided (side)", lambda r: fmt_two_sided(r.site, interval=False)),
    column("RM;RN one-sided / two-sided", _rm_rn_pair),
    column("O(1)", lambda r: fmt(O1.value(r.site))),
    column(
        "canary f-DP eps_lb (GDP mu, delta)",
        lambda r: fmt_fdp(
            INPUT_CANARY_FDP.value(r.site),
            None if r.site.results.input_canaries is None else r.site.results.input_canaries.fdp_mu,
            r.site.checks.fdp_delta,
        ),
        fold=1,
    ),
    column(
        "O(1) f-DP (GDP mu)",
        lambda r: fmt_fdp(
            O1_FDP.value(r.site),
            None if r.site.panoramia is None else mean_of(r.site.panoramia.o1_fdp_mu),
            None,
        ),
        fold=2,
    ),
    column(
        "best lower bound (method)",
        lambda r: fmt_best(r.site.checks.best_eps_lb, r.site.checks.best_eps_lb_method),
        cls="text",
        fold=2,
    ),
    column(
        "accuracy global / site holdout",
        lambda r: f"{fmt(r.global_accuracy)} / {fmt(HOLDOUT_ACCURACY.value(r.site))}",
        fold=2,
    ),
    column("f loss members / holdout", lambda r: fmt_loss_gap(r.site), fold=2),
    column("ordering check", lambda r: ordering_text(r.site), cls="text"),
    column(
        "sent outside the guarantee (declared size)",
        lambda r: fmt_outside(r.site.privacy),
        cls="text",
        fold=2,
    ),
)
"""The "Privacy ledger" table of report.md (one table) and report.html (:data:`LEDGER_GROUPS`;
the run's DP level stands above it)."""

LEDGER_GROUPS = grouped(("", "Client-level DP and canaries", "Other readings"), LEDGER_COLUMNS)
""":data:`LEDGER_COLUMNS` in report.html: the guarantees beside what was measured against
them first, the rest folded."""


def _one_flags(s: SiteReport) -> list[str]:
    return flag_labels(None if s.panoramia is None else s.panoramia.one_sided.flags)
