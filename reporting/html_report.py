"""report.html writer for one run."""

from __future__ import annotations

from pathlib import Path

from audit.result import AuditResult

from . import plots
from .columns import LEDGER_COLUMNS, SITE_COLUMNS, html_cells, html_headers
from .formatting import (
    MISSING,
    canary_banner,
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
    meaning_block,
    page,
    th_row,
    violation_banner,
)
from .schema import RunReport, SiteReport, to_jsonable


def _row_class(site: SiteReport) -> str:
    if site.bound_violations:
        return "violation"
    if site.status != "ok":
        return site.status
    if site.flags and site.flags.c_lb_not_tight:
        return "not-tight"
    if site.flags and site.flags.saturated:
        return "saturated"
    return "ok"


def _site_row(site: SiteReport) -> str:
    reasons = "; ".join(f"{scope}: {r}" for scope, r in scoped_reasons(site))
    title = f' title="{esc(reasons)}"' if reasons else ""
    return f'<tr class="{esc(_row_class(site))}"{title}>' + html_cells(SITE_COLUMNS, site) + "</tr>"


def banners(report: RunReport) -> list[str]:
    """The banners at the top of the page: bound violations, then canaries."""
    violations = [v for s in report.sites for v in s.bound_violations]
    return [
        violation_banner(violation_banner_lines(violations)),
        canary_block(canary_banner(report.canaries) if report.canaries else None),
    ]


def _ledger_table(report: RunReport) -> list[str]:
    if not report.ledger:
        return []
    rows = [
        f'<tr class="{esc("violation" if row.bound_violations else row.status)}">'
        + html_cells(LEDGER_COLUMNS, row)
        + "</tr>"
        for row in report.ledger
    ]
    above = [s for s in report.sites if s.eps_tilde_above_accountant_reason]
    return [
        "<h2>Privacy ledger</h2>",
        "<p>Each site's guarantees (accountant, delta) beside its measured lower bounds and "
        "eps_tilde. Every lower bound (canary, O(1), RM;RN) must be at most DP eps, the "
        "record-level guarantee that applies to the site's records; eps_tilde is a "
        "measurement, not a bound.</p>",
        *([f'<p class="noise">DP {esc(report.noise)}.</p>'] if report.noise else []),
        '<div class="wide"><table id="ledger">',
        th_row(html_headers(LEDGER_COLUMNS)),
        *rows,
        "</table></div>",
        _list([f"site {s.site_id}: {s.eps_tilde_above_accountant_reason}" for s in above])
        if above
        else "",
    ]


def _problems(report: RunReport) -> list[str]:
    parts: list[str] = []
    flagged = [(s.site_id, *sr) for s in report.sites for sr in scoped_reasons(s)]
    if flagged:
        parts.append("<h3>Flag reasons</h3><ul>")
        parts += [f"<li>site {esc(sid)} ({esc(scope)}): {esc(r)}</li>" for sid, scope, r in flagged]
        parts.append("</ul>")
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


def _list(items: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>"


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
    """The HTML text of ``report.html``.

    Parameters
    ----------
    report
        The aggregated report.
    results
        The ok sites' AuditResults by site id (for the curves; scores are never used).
    """
    run_name = report.run.get("name") if isinstance(report.run, dict) else None
    title = f"PANORAMIA consortium audit report{f' - {run_name}' if run_name else ''}"
    levels = levels_lines(report.sites)
    body = [
        f"<h1>{esc(title)}</h1>",
        *banners(report),
        f"<p>Report schema version {esc(report.schema_version)}. Numbers are rounded for "
        "display; hover a cell for the full value, or read the embedded JSON "
        "(id report-data), report.json or report.csv.</p>",
        meaning_block(),
        "<h2>Consortium summary</h2>",
        _list(consortium_lines(report.consortium)),
        "<h2>Per-site audit</h2>",
        '<div class="wide"><table>',
        th_row(html_headers(SITE_COLUMNS)),
        *[_site_row(s) for s in report.sites],
        "</table></div>",
        "<p>Row colours: yellow = saturated (eps_tilde reads headroom, not leakage); red = "
        "c_lb not tight (eps_tilde may overstate); grey = failed or missing audit; dark red "
        "border = a bound violation (see the banner at the top). Row colours "
        "and the badges beside eps_tilde are the one-sided game's; the badges beside the "
        "two-sided eps_tilde are its sides' (hover a row for the reasons).</p>",
        _list(levels) if levels else "",
        *_problems(report),
        *_ledger_table(report),
        *(
            ["<h2>Canary clients</h2>", _list(report.client_canaries["summary"])]
            if report.client_canaries
            else []
        ),
        "<h2>eps_tilde per site</h2>",
        figure(
            plots.site_eps_plot(report.sites),
            "eps_tilde (one-sided) and eps_tilde two-sided with their 95% t-intervals over "
            "repeats; RM;RN and O(1) lower bounds beside them where the run had real "
            "non-members; grey bar: one-sided headroom ceiling - c_lb, the largest one-sided "
            "eps_tilde this audit set can show. eps_tilde is a lower bound on eps only where "
            "c_lb is tight.",
            alt="eps_tilde per site",
        ),
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
        "<h2>Training</h2>",
        figure(
            plots.training_plot(report.rounds),
            "Global loss and accuracy per round; each site's local train loss and its "
            "accountant epsilon per round (when DP is on).",
            alt="training curves",
        ),
    ]
    return page(title, body, data=to_jsonable(report))


def write_html(report: RunReport, results: dict[int, AuditResult], path: Path) -> Path:
    """Write ``report.html``."""
    path.write_text(render_html(report, results))
    return path
