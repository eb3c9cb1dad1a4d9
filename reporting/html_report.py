"""report.html writer for one run."""

from __future__ import annotations

from audit.result import AuditResult
from contracts.json_values import json_safe

from . import plots
from .columns import HEADLINE_COLUMNS, LEDGER_COLUMNS, SITE_COLUMNS, SiteRow, html_table
from .formatting import (
    EPS_PLOT_CAPTION,
    HEADLINE_NOTE,
    LEDGER_INTRO,
    MISSING,
    canary_banner,
    client_canary_lines,
    consortium_lines,
    levels_lines,
    scoped_reasons,
    scorer_cells,
    scorer_headers,
    violation_banner_lines,
)
from .html_page import (
    canary_block,
    esc,
    figure,
    html_list,
    meaning_block,
    page,
    violation_banner,
)
from .schema import RunReport, SiteReport
from .site_page import by_round_section


def site_row_class(site: SiteReport) -> str:
    flags = None if site.audit is None else site.audit.one_sided.flags
    if site.checks.bound_violations:
        return "violation"
    if site.status != "ok":
        return site.status
    if flags and flags.c_lb_not_tight:
        return "not-tight"
    return "saturated" if flags and flags.saturated else "ok"


def banners(report: RunReport) -> list[str]:
    """The banners at the top of the page: bound violations, then canaries."""
    violations = [v for s in report.sites for v in s.checks.bound_violations]
    return [
        violation_banner(violation_banner_lines(violations)),
        canary_block(canary_banner(report.canaries) if report.canaries else None),
    ]


def ledger_rows(report: RunReport) -> list[SiteRow]:
    """The privacy ledger's rows: each site with the run's final global accuracy."""
    return [SiteRow(s, report.consortium.final_global_accuracy) for s in report.sites]


def _ledger_table(report: RunReport) -> list[str]:
    if not report.sites:
        return []
    above = [s for s in report.sites if s.checks.eps_tilde_above_accountant]
    return [
        "<h2>Privacy ledger</h2>",
        f"<p>{esc(LEDGER_INTRO)} DP level of the run: {esc(report.dp_level or MISSING)}.</p>",
        *([f'<p class="noise">DP {esc(report.noise)}.</p>'] if report.noise else []),
        '<div class="wide">',
        html_table(
            LEDGER_COLUMNS,
            ledger_rows(report),
            attrs=' id="ledger"',
            row_class=lambda r: "violation" if r.site.checks.bound_violations else r.site.status,
        ),
        "</div>",
        html_list([f"site {s.site_id}: {s.checks.eps_tilde_above_accountant}" for s in above])
        if above
        else "",
    ]


def _problems(report: RunReport) -> list[str]:
    parts: list[str] = []
    flagged = [(s.site_id, *sr) for s in report.sites for sr in scoped_reasons(s)]
    if flagged:
        parts.append("<h3>Flag reasons</h3>")
        parts.append(html_list([f"site {sid} ({scope}): {r}" for sid, scope, r in flagged]))
    bad = [s for s in report.sites if s.status != "ok"]
    if bad:
        parts.append("<h3>Sites without an audit</h3><ul>")
        for s in bad:
            why = s.error if s.status == "failed" else "no audit file in audits/"
            parts.append(
                f"<li>site {esc(s.site_id)} ({esc(s.status)}): "
                f'<span class="error">{esc(why or MISSING)}</span></li>'
            )
        parts.append("</ul>")
    return parts


def _roc_figures(report: RunReport, results: dict[int, AuditResult]) -> list[str]:
    """One log-log ROC figure per ok site whose audit has ROC summaries."""
    drawn = [s for s in report.sites if s.site_id in results and results[s.site_id].roc]
    if not drawn:
        return [figure(None, "", alt="log-scale ROC (the audits carry no ROC summaries)")]
    return [
        figure(
            plots.roc_plot(s.site_id, results[s.site_id].roc, len(results[s.site_id].repeats)),
            f"site {s.site_id}: "
            + "; ".join(f"{h} = {c}" for h, c in zip(scorer_headers(), scorer_cells(s))),
            alt=f"log-scale ROC, site {s.site_id}",
        )
        for s in drawn
    ]


def render_html(report: RunReport, results: dict[int, AuditResult]) -> str:
    """The HTML text of ``report.html``; ``results``: the ok sites' AuditResults by site id
    (for the curves; scores are never used)."""
    run_name = report.run.get("name") if isinstance(report.run, dict) else None
    title = f"PANORAMIA consortium audit report{f' - {run_name}' if run_name else ''}"
    levels = levels_lines(report.sites)
    body = [
        f"<h1>{esc(title)}</h1>",
        *banners(report),
        "<h2>Headline</h2>",
        html_table(
            HEADLINE_COLUMNS, report.sites, attrs=' id="headline"', row_class=site_row_class
        ),
        f"<p>{esc(HEADLINE_NOTE)} Hover a cell for the full value.</p>",
        "<h3>Consortium summary</h3>",
        html_list(consortium_lines(report.consortium)),
        meaning_block(),
        f"<p>Report schema version {esc(report.schema_version)}. Numbers are rounded for "
        "display; hover a cell for the full value, or read the embedded JSON "
        "(id report-data), report.json or report.csv.</p>",
        "<h2>Per-site audit</h2>",
        '<div class="wide">',
        html_table(
            SITE_COLUMNS,
            report.sites,
            row_class=site_row_class,
            row_title=lambda s: "; ".join(f"{scope}: {r}" for scope, r in scoped_reasons(s)),
        ),
        "</div>",
        "<p>Row colours: yellow = saturated (eps_tilde reads headroom, not leakage); red = "
        "c_lb not tight (eps_tilde may overstate); grey = failed or missing audit; dark red "
        "border = a bound violation (see the banner at the top). Row colours "
        "and the badges beside eps_tilde are the one-sided game's; the badges beside the "
        "two-sided eps_tilde are its sides' (hover a row for the reasons).</p>",
        html_list(levels) if levels else "",
        *_problems(report),
        *_ledger_table(report),
        *(
            ["<h2>Canary clients</h2>", html_list(client_canary_lines(report.client_canaries))]
            if report.client_canaries is not None
            else []
        ),
        "<h2>eps_tilde per site</h2>",
        figure(plots.site_eps_plot(report.sites), EPS_PLOT_CAPTION, alt="eps_tilde per site"),
        "<h2>Low-FPR ROC per site (log-log)</h2>",
        "<p>True-positive rate against false-positive rate on log axes, mean over repeats: "
        "b (blue) and the MIA (red) in the privacy game (members against generated records), "
        "RM;RN (green) against real held-out non-members; dotted: chance (TPR = FPR). A curve "
        "far above the diagonal at the left exposes a few records with high confidence.</p>",
        *_roc_figures(report, results),
        "<h2>Precision-recall: baseline b vs MIA</h2>",
        figure(
            plots.precision_recall_plot(report.sites, results),
            "Per site, precision against recall of b (blue, no access to the model) and of "
            "the MIA (red, sees the target model) in the privacy game, one line per repeat.",
            alt="precision-recall per site",
        ),
        "<h2>Lower bound against recall</h2>",
        figure(
            plots.bound_recall_plot(report.sites, results),
            "Per site, the bound at each recall level: c for b (blue) and c+eps for the MIA "
            "(red); the dashed line is the ceiling, the bound of a perfect scorer.",
            alt="bound against recall per site",
        ),
        *(
            ["<h2>Leakage over rounds</h2>"]
            + [
                x
                for s in report.sites
                for x in by_round_section(s, heading="h3", title=f"Site {s.site_id}")
            ]
            if report.consortium.first_leaking_round
            else []
        ),
        "<h2>Training</h2>",
        figure(
            plots.training_plot(report.rounds),
            "Global loss and accuracy per round; each site's local train loss and its "
            "accountant epsilon per round (when DP is on).",
            alt="training curves",
        ),
    ]
    return page(title, body, data=json_safe(report))
