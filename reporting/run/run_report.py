"""report.md and report.html of one run: one layout (:func:`report_blocks`), two formats."""

from __future__ import annotations

from ..gate.gate_blocks import gate_blocks
from ..layout.banners import (
    client_canary_lines,
    consortium_banner,
    input_canary_banner,
    training_banner_lines,
)
from ..layout.between_runs import run_lines
from ..layout.blocks import (
    Banner,
    Block,
    Bullets,
    Errors,
    Figure,
    Heading,
    Meaning,
    Para,
    Table,
    grouped_table,
    to_html,
    to_markdown,
)
from ..layout.columns import (
    HEADLINE_COLUMNS,
    LEDGER_COLUMNS,
    LEDGER_GROUPS,
    SITE_COLUMNS,
    SITE_GROUPS,
    SiteRow,
    site_row_class,
)
from ..numbers.formatting import (
    MISSING,
    consortium_lines,
    levels_lines,
    scoped_reasons,
    scorer_cells,
    scorer_headers,
)
from ..numbers.meanings import NOTES, Note
from ..numbers.report_parts import report_parts
from ..pages import plots
from ..pages.html_page import page
from ..schemas.lost_sites import NOT_STARTED, lost_sites, stopped_before_training
from ..schemas.schema import RunReport, SiteReport, report_json
from ..site.site_page import by_round_blocks, update_blocks


def title(run_name: str | None) -> str:
    return "PANORAMIA consortium audit report" + (f" - {run_name}" if run_name else "")


def named_sites(report: RunReport) -> list[tuple[str, SiteReport]]:
    """The run's sites as its banner and warnings name them."""
    return [(f"site {s.site_id}", s) for s in report.sites]


def render_markdown(report: RunReport, run_name: str | None = None, *, audited: bool = True) -> str:
    """The Markdown text of ``report.md`` (the tables; the plots are in report.html);
    ``run_name`` (the config's ``name``) goes into its title; ``audited``: the run audits
    its sites (a site without an audit is then lost)."""
    return to_markdown(report_blocks(report, run_name, audited=audited))


def render_html(report: RunReport, run_name: str | None = None, *, audited: bool = True) -> str:
    """The HTML text of ``report.html``."""
    body = to_html(report_blocks(report, run_name, audited=audited))
    return page(title(run_name), body, data=report_json(report))


def report_blocks(
    report: RunReport, run_name: str | None = None, *, audited: bool = True
) -> list[Block]:
    """The report, section by section: what the run lost first, the headline, the
    explanation folded under it, then the full tables, the ledger, the plots and the
    rounds."""
    sites = report.sites
    named = named_sites(report)
    return [
        Heading(title(run_name), 1),
        Banner("lost", lost_sites(report, audited=audited).lines()),
        Banner(
            "untrained",
            [NOT_STARTED]
            if stopped_before_training(report)
            else training_banner_lines(report.rounds),
        ),
        Banner(*consortium_banner(named, "run")),
        Banner("canaries", [input_canary_banner(report.canaries)] if report.canaries else []),
        *gate_blocks(report.gate),
        Heading("Headline"),
        Table(HEADLINE_COLUMNS, sites, attrs=' id="headline"', row_class=site_row_class),
        Para(NOTES[Note.HEADLINE], only="md"),
        Para(f"{NOTES[Note.HEADLINE]} Hover a cell for the full value.", only="html"),
        Bullets(run_lines(report)),
        Heading("Consortium summary", 3),
        Bullets(consortium_lines(report.consortium)),
        Meaning(),
        Para(
            f"Report schema version {report.schema_version}. Numbers are rounded for display; "
            "hover a cell for the full value, or read the embedded JSON (id report-data), "
            "report.json or report.csv.",
            only="html",
        ),
        Para(
            f"Report schema version {report.schema_version}. Numbers are rounded for display; "
            "report.json and report.csv hold them in full.",
            only="md",
        ),
        Heading("Per-site audit"),
        Table(SITE_COLUMNS, sites, only="md"),
        *grouped_table(
            SITE_GROUPS,
            sites,
            row_class=site_row_class,
            row_title=lambda s: "; ".join(f"{scope}: {r}" for scope, r in scoped_reasons(s)),
        ),
        Para(NOTES[Note.ROW_COLOURS], only="html"),
        Para(NOTES[Note.FLAG_LEGEND], only="md"),
        Bullets(levels_lines(sites)),
        *_problems(report),
        *_ledger(report),
        *(b for part in report_parts() if part.run_section for b in part.run_section(report)),
        *_client_canaries(report),
        *_figures(report),
        *_over_rounds(report),
        Heading("Training", only="html"),
        Figure(
            plots.training_plot(report.rounds),
            "Global loss and accuracy per round; each site's local train loss (not sent "
            "under record-level DP) and its accountant epsilon per round (when DP is on).",
            alt="training curves",
        ),
    ]


def _client_canaries(report: RunReport) -> list[Block]:
    if report.client_canaries is None:
        return []
    return [Heading("Canary clients"), Bullets(client_canary_lines(report.client_canaries))]


def _over_rounds(report: RunReport) -> list[Block]:
    """Each site's leakage over rounds, when any site was audited over rounds."""
    per_site = [
        [
            *by_round_blocks(s, level=3, title=f"Site {s.site_id}"),
            *update_blocks(s, level=4, title=f"Site {s.site_id}'s own updates"),
        ]
        for s in report.sites
    ]
    if not any(per_site):
        return []
    return [Heading("Leakage over rounds"), *(b for blocks in per_site for b in blocks)]


def ledger_rows(report: RunReport) -> list[SiteRow]:
    """The privacy ledger's rows: each site with the run's final global accuracy."""
    return [SiteRow(s, report.consortium.final_global_accuracy) for s in report.sites]


def _problems(report: RunReport) -> list[Block]:
    blocks: list[Block] = []
    flagged = [(s.site_id, *sr) for s in report.sites for sr in scoped_reasons(s)]
    if flagged:
        blocks += [
            Heading("Flag reasons", 3),
            Bullets([f"site {sid} ({scope}): {r}" for sid, scope, r in flagged]),
        ]
    bad = [s for s in report.sites if s.status != "ok"]
    if bad:
        blocks += [
            Heading("Sites without an audit", 3),
            Errors([(f"site {s.site_id} ({s.status})", _why_missing(s)) for s in bad]),
        ]
    return blocks


def _why_missing(site: SiteReport) -> str:
    """Why a site has no audit: its error, or no audit file."""
    why = site.error if site.status == "failed" else "no audit file in audits/"
    return why or MISSING


def _ledger(report: RunReport) -> list[Block]:
    if not report.sites:
        return []
    above = [s for s in report.sites if s.checks.eps_tilde_above_accountant]
    return [
        Heading("Privacy ledger"),
        Para(
            f"{NOTES[Note.LEDGER_INTRO]} DP level of the run: {report.dp_level or MISSING}"
            + (NOTES[Note.SECURE_SUM] if report.secure_aggregation == "ideal" else ".")
        ),
        *([Para(f"DP {report.noise}.")] if report.noise else []),
        Table(LEDGER_COLUMNS, ledger_rows(report), only="md"),
        *grouped_table(
            LEDGER_GROUPS,
            ledger_rows(report),
            attrs=' id="ledger"',
            row_class=lambda r: "violation" if r.site.checks.bound_violations else r.site.status,
        ),
        Bullets([f"site {s.site_id}: {s.checks.eps_tilde_above_accountant}" for s in above]),
    ]


def _figures(report: RunReport) -> list[Block]:
    """The plots of report.html (Markdown has none)."""
    sites = report.sites
    return [
        Heading("eps_tilde per site", only="html"),
        Figure(plots.site_eps_plot(sites), NOTES[Note.EPS_PLOT_CAPTION], alt="eps_tilde per site"),
        Heading("Low-FPR ROC per site (log-log)", only="html"),
        Para(NOTES[Note.ROC], only="html"),
        *_roc_figures(report),
        Heading("Precision-recall: baseline b vs MIA", only="html"),
        Figure(
            plots.precision_recall_plot(sites),
            NOTES[Note.PR_CAPTION],
            alt="precision-recall per site",
        ),
        Heading("Lower bound against recall", only="html"),
        Figure(
            plots.bound_recall_plot(sites),
            NOTES[Note.BOUND_RECALL_CAPTION],
            alt="bound against recall per site",
        ),
    ]


def _roc_figures(report: RunReport) -> list[Block]:
    """One log-log ROC figure per ok site whose audit has ROC summaries."""
    drawn = [(s, s.panoramia) for s in report.sites if s.panoramia is not None and s.panoramia.roc]
    if not drawn:
        return [Figure(None, "", alt="log-scale ROC (the audits carry no ROC summaries)")]
    return [
        Figure(
            plots.roc_plot(s.site_id, a.roc, len(a.repeats)),
            f"site {s.site_id}: "
            + "; ".join(f"{h} = {c}" for h, c in zip(scorer_headers(), scorer_cells(s))),
            alt=f"log-scale ROC, site {s.site_id}",
        )
        for s, a in drawn
    ]
