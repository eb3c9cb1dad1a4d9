"""report.html writer for one run."""

from __future__ import annotations

from pathlib import Path

from audit.result import AuditResult

from . import plots
from .html_page import badge, esc, figure, meaning_block, page, td, th_row
from .schema import RunReport, SiteReport, to_jsonable
from .text import MISSING, fmt, fmt_interval, fmt_loss_gap

_HEADERS = (
    "site",
    "status",
    "n_members",
    "c_lb",
    "ceiling",
    "headroom",
    "{c+eps}_lb",
    "eps_tilde",
    "eps_tilde 95% CI",
    "RM;RN",
    "O(1)",
    "f loss members / holdout",
    "DP eps",
    "generator",
)


def _row_class(site: SiteReport) -> str:
    if site.status != "ok":
        return site.status
    if site.flags and site.flags.c_lb_not_tight:
        return "not-tight"
    if site.flags and site.flags.saturated:
        return "saturated"
    return "ok"


def _site_row(site: SiteReport) -> str:
    badges = ""
    if site.flags:
        if site.flags.saturated:
            badges += badge("saturated", "saturated")
        if site.flags.c_lb_not_tight:
            badges += badge("c_lb not tight", "not-tight")
        if site.flags.rm_rn_capped:
            badges += badge("RM;RN capped", "saturated")
    if site.status != "ok":
        badges += badge(site.status, site.status)
    reasons = "; ".join(site.flags.reasons) if site.flags else ""
    cells = [
        td(str(site.site_id)),
        td(site.status, cls="text"),
        td(fmt(site.n_members)),
        td(fmt(site.c_lb), title=site.c_lb),
        td(fmt(site.ceiling), title=site.ceiling),
        td(fmt(site.headroom), title=site.headroom),
        td(fmt(site.c_eps_lb), title=site.c_eps_lb),
        td(esc(fmt(site.eps_tilde)) + badges, title=site.eps_tilde, raw=True),
        td(fmt_interval(site.eps_tilde_interval)),
        td(_with_iv(site.rm_rn_eps_lb, site.rm_rn_eps_lb_interval), title=site.rm_rn_eps_lb),
        td(_with_iv(site.o1_eps_lb, site.o1_eps_lb_interval), title=site.o1_eps_lb),
        td(fmt_loss_gap(site)),
        td(
            fmt(site.dp_epsilon, 2) if site.dp_epsilon is not None else "off", title=site.dp_epsilon
        ),
        td(site.generator_kind or MISSING, cls="text"),
    ]
    title = f' title="{esc(reasons)}"' if reasons else ""
    return f'<tr class="{esc(_row_class(site))}"{title}>' + "".join(cells) + "</tr>"


def _with_iv(value: float | None, iv: object) -> str:
    bounds = fmt_interval(iv)  # type: ignore[arg-type]
    return fmt(value) + (f" {bounds}" if value is not None and bounds else "")


def _problems(report: RunReport) -> list[str]:
    parts: list[str] = []
    flagged = [(s.site_id, r) for s in report.sites if s.flags for r in s.flags.reasons]
    if flagged:
        parts.append("<h3>Flag reasons</h3><ul>")
        parts += [f"<li>site {esc(sid)}: {esc(r)}</li>" for sid, r in flagged]
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


def _consortium(report: RunReport) -> str:
    c = report.consortium
    items = [
        f"sites: {c.n_sites} ({c.n_ok} ok, {c.n_failed} failed, {c.n_missing} missing)",
        f"max eps_tilde over ok sites: {fmt(c.max_eps_tilde)} (leakiest site: "
        f"{MISSING if c.leakiest_site_id is None else c.leakiest_site_id})",
        f"median eps_tilde over ok sites: {fmt(c.median_eps_tilde)}",
        "saturated sites: "
        + (", ".join(map(str, c.saturated_sites)) or "none")
        + "; c_lb not tight: "
        + (", ".join(map(str, c.not_tight_sites)) or "none")
        + "; RM;RN capped: "
        + (", ".join(map(str, c.rm_rn_capped_sites)) or "none"),
        "largest DP eps (accountant): "
        + (fmt(c.max_dp_epsilon, 2) if c.max_dp_epsilon is not None else "DP off"),
        f"rounds: {c.rounds_completed}; final global accuracy {fmt(c.final_global_accuracy)}, "
        f"loss {fmt(c.final_global_loss)}",
    ]
    return "<ul>" + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>"


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
    body = [
        f"<h1>{esc(title)}</h1>",
        f"<p>Report schema version {esc(report.schema_version)}. Numbers are rounded for "
        "display; hover a cell for the full value, or read the embedded JSON "
        "(id report-data), report.json or report.csv.</p>",
        meaning_block(),
        "<h2>Consortium summary</h2>",
        _consortium(report),
        "<h2>Per-site audit</h2>",
        "<table>",
        th_row(_HEADERS),
        *[_site_row(s) for s in report.sites],
        "</table>",
        "<p>Row colours: yellow = saturated (eps_tilde reads headroom, not leakage); red = "
        "c_lb not tight (eps_tilde overstates); grey = failed or missing audit.</p>",
        *_problems(report),
        "<h2>eps_tilde per site</h2>",
        figure(
            plots.site_eps_plot(report.sites),
            "eps_tilde with its 95% t-interval over repeats; RM;RN and O(1) lower bounds beside "
            "it where the run had real non-members; grey bar: headroom ceiling - c_lb, the "
            "largest eps_tilde this audit set can show. eps_tilde is a lower bound on eps "
            "only where c_lb is tight.",
            alt="eps_tilde per site",
        ),
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
        "<h2>Reading these numbers</h2>",
        meaning_block(),
    ]
    return page(title, body, data=to_jsonable(report))


def write_html(report: RunReport, results: dict[int, AuditResult], path: Path) -> Path:
    """Write ``report.html``."""
    path.write_text(render_html(report, results))
    return path
