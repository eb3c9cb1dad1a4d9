"""A site's own leakage report as a self-contained HTML page (``site-reports/site-<id>.html``).

Plain language first (the headline, what was measured, what it means, what it does not
show), the link to the site-local exposed records, the site's standing in the consortium
and the threat model: what a privacy officer reads. Then the detail a specialist checks
and the reproducibility manifest. The page embeds its JSON (:class:`~.schema.SitePageReport`)
like report.html does.
"""

from __future__ import annotations

from audit.result import AuditResult

from . import leakage_views, plots
from .formatting import (
    FPR_LABELS,
    MISSING,
    SCORER_LABELS,
    SIDE_LABELS,
    canary_banner,
    flag_labels,
    fmt,
    fmt_best,
    fmt_canary,
    fmt_dp,
    fmt_fdp,
    fmt_loss_gap,
    fmt_two_sided,
    fmt_with_interval,
    levels_lines,
    ordering_text,
    scoped_reasons,
    violation_banner_lines,
)
from .html_page import (
    canary_block,
    esc,
    figure,
    flag_badges,
    meaning_block,
    page,
    td,
    th_row,
    violation_banner,
)
from .schema import (
    SCORERS,
    SIDES,
    TPR_FPR_KEYS,
    SideReport,
    SitePageReport,
    SiteReport,
    to_jsonable,
)

_VERDICT_LABELS = {
    "evidence": "leakage measured",
    "inconclusive": "within noise of zero",
    "none": "no leakage measured",
    "no result": "no result",
}


def render_site_page(report: SitePageReport, result: AuditResult | None) -> str:
    """The HTML text of a site's report.

    Parameters
    ----------
    report
        The site's report (everything the page shows).
    result
        The site's AuditResult, for the curves (None for a failed audit); its per-record
        scores, if any, are never used.
    """
    site = report.site
    title = f"Leakage report for site {site.site_id}" + (
        f" - {report.run_name}" if report.run_name else ""
    )
    body = [
        f"<h1>{esc(title)}</h1>",
        violation_banner(violation_banner_lines(site.bound_violations)),
        canary_block(canary_banner(site.canaries) if site.canaries else None),
        "<p>How much the consortium's final shared model reveals about this site's own "
        "training records, measured at the site with PANORAMIA. "
        + (
            "Written by the consortium's report aggregator."
            if report.source == "consortium"
            else "Rebuilt by the site from its own audit file alone."
        )
        + "</p>",
        _headline(report),
        "<h2>What was measured</h2>",
        _list(report.reading.measured),
        "<h2>What it means for your records</h2>",
        _list(report.reading.meaning),
        "<h2>What it does not show</h2>",
        _list(report.reading.not_shown),
        *_exposed(report),
        "<h2>Where your site stands in the consortium</h2>",
        *_standing(report),
        "<h2>Threat model</h2>",
        _list(report.threat_model, ordered=True),
        *leakage_views.by_round_section(site.by_round, heading="h2"),
        *leakage_views.per_class_section(site.per_class, heading="h2"),
        "<h2>Detail</h2>",
        *(_detail(site, result) if site.status == "ok" else [_failed(site)]),
        "<h3>Privacy guarantees and the ordering check</h3>",
        _privacy_table(report),
        "<h2>Reproducibility</h2>",
        _manifest(report),
    ]
    return page(title, body, data=to_jsonable(report))


def _list(items: list[str], *, ordered: bool = False) -> str:
    tag = "ol" if ordered else "ul"
    return f"<{tag}>" + "".join(f"<li>{esc(i)}</li>" for i in items) + f"</{tag}>"


def _headline(report: SitePageReport) -> str:
    site, reading = report.site, report.reading
    verdict = reading.verdict
    numbers = ""
    if site.status == "ok":
        two = (
            fmt_two_sided(site) if site.eps_tilde_two_sided is not None else "- (audit predates it)"
        )
        numbers = (
            '<div class="numbers">'
            f'<div><div class="label">eps_tilde, two-sided [95% CI] (side)</div>'
            f'<div class="value" id="eps-tilde-two-sided">{esc(two)}</div></div>'
            f'<div><div class="label">eps_tilde, one-sided (the paper\'s) [95% CI]</div>'
            f'<div class="value" id="eps-tilde">'
            f"{esc(fmt_with_interval(site.eps_tilde, site.eps_tilde_interval))}</div></div>"
            "</div>"
        )
    return (
        '<div class="headline">'
        f'<span class="verdict {esc(verdict.replace(" ", "-"))}">'
        f"{esc(_VERDICT_LABELS[verdict])}</span>"
        f"{numbers}<p>{esc(reading.headline)}</p></div>"
    )


def _exposed(report: SitePageReport) -> list[str]:
    if report.exposed_records_link is None:
        return []
    link = esc(report.exposed_records_link)
    return [
        "<h2>Your most exposed records (site-local)</h2>",
        '<p class="site-local">Your site kept its own list of the members the model exposes '
        f'most, with their scores: <a href="{link}">{link}</a>. It stays at your site: it is '
        "never sent to the server, and neither this page nor the consortium report copies "
        "its content.</p>",
    ]


def _standing(report: SitePageReport) -> list[str]:
    st = report.standing
    lines = []
    if st.rank is not None and st.n_ranked is not None:
        lines.append(
            f"Your site ranks {st.rank} of {st.n_ranked} by two-sided eps_tilde "
            "(1 = the most leakage measured)."
        )
    if st.median_eps_tilde_two_sided is not None:
        lines.append(f"Consortium median: {fmt(st.median_eps_tilde_two_sided)}.")
    if st.max_eps_tilde_two_sided is not None:
        lines.append(f"Consortium maximum: {fmt(st.max_eps_tilde_two_sided)}.")
    lines.append(st.note)
    return [_list(lines)]


_BOUNDS_HEADERS = (
    "game",
    "c_lb [95% CI]",
    "{c+eps}_lb [95% CI]",
    "eps_tilde [95% CI]",
    "ceiling",
    "headroom",
    "RM;RN [95% CI]",
    "RM;RN ceiling",
    "level of each bound",
    "flags",
)


def _bounds_row(game: str, block: SiteReport | SideReport, level: float | None) -> str:
    """One game's bounds; the one-sided game (SiteReport) and a side share the field names."""
    return (
        "<tr>"
        + td(game, cls="text")
        + td(fmt_with_interval(block.c_lb, block.c_lb_interval))
        + td(fmt_with_interval(block.c_eps_lb, block.c_eps_lb_interval))
        + td(fmt_with_interval(block.eps_tilde, block.eps_tilde_interval), title=block.eps_tilde)
        + td(fmt(block.ceiling), title=block.ceiling)
        + td(fmt(block.headroom), title=block.headroom)
        + td(fmt_with_interval(block.rm_rn_eps_lb, block.rm_rn_eps_lb_interval))
        + td(fmt(getattr(block, "rm_rn_ceiling", None)))
        + td(fmt(level, 4))
        + td(flag_badges(flag_labels(block.flags)) or MISSING, raw=True, cls="text")
        + "</tr>"
    )


def _bounds_table(site: SiteReport) -> str:
    rows = [_bounds_row("one-sided (the paper's)", site, site.levels.get("c_lb"))]
    two = site.two_sided
    if two is not None:
        rows += [
            _bounds_row(f"two-sided: {SIDE_LABELS[side]} side", getattr(two, side), two.beta)
            for side in SIDES
        ]
    return '<table id="bounds">' + th_row(_BOUNDS_HEADERS) + "".join(rows) + "</table>"


_DP_SOURCES = {
    "audit": "record-level accountant, from your audit",
    "metrics": "record-level accountant, from the training log",
    "client_dp": "implied by client-level DP",
}


def _privacy_table(report: SitePageReport) -> str:
    """Every guarantee that speaks for the site's records, the canary audit and the check."""
    site, row = report.site, report.ledger
    client_what = None
    if row is not None:
        client_what = "; ".join(
            x
            for x in (row.client_accountant, row.client_sampling, row.client_neighboring_relation)
            if x
        )
    dp = (
        fmt_dp(site.dp_epsilon, site.dp_delta, _DP_SOURCES.get(site.dp_epsilon_source or ""))
        if site.dp_epsilon is not None
        else "off (no DP)"
    )
    rows = [
        (
            "DP guarantee for your records",
            dp,
            "the record-level epsilon that applies: the smaller of the record-level "
            "accountant's and the one client-level DP implies per record (an upper bound on how "
            "much any one of your records can change what the model reveals)",
        ),
        (
            "record-level accountant (DP-SGD at your site)",
            fmt_dp(
                site.dp_epsilon_record,
                None if row is None else row.record_delta,
                None if row is None else row.record_accountant,
            ),
            "your site's own DP-SGD training, all rounds",
        ),
        (
            "client-level accountant, site level",
            fmt_dp(
                site.dp_epsilon_client,
                None if row is None else row.client_delta,
                client_what or None,
            ),
            "the server's noise on the aggregate: covers adding or removing your whole site",
        ),
        (
            "client-level DP, implied per record",
            fmt(site.dp_epsilon_client_record)
            if site.dp_epsilon_client_record is not None
            else "off",
            "the record-level epsilon client-level DP implies (one record moves your clipped "
            "update by at most twice the clipping norm)",
        ),
        (
            "canary audit eps lower bound [interval]",
            fmt_canary(site.canary_eps_lb, site.canary_eps_interval, site.canaries),
            "canary records trained on by a fair coin each, guessed from the final model "
            "(Steinke et al. 2023, one run, delta = 0): a lower bound on epsilon",
        ),
        (
            "canary audit f-DP eps lower bound",
            fmt_fdp(site.canary_eps_lb_fdp, site.canary_fdp_mu, site.fdp_delta),
            "the same guesses read against a Gaussian trade-off curve (Mahloujifar et al. "
            "2025): the largest Gaussian-DP mu they reject, as epsilon at delta",
        ),
        (
            "best lower bound",
            fmt_best(site.best_eps_lb, site.best_eps_lb_method),
            "the largest one-run lower bound (canary audit or O(1); Steinke et al. or f-DP), "
            "with the method that gave it",
        ),
        (
            "ordering check",
            ordering_text(site.bound_violations, site.eps_tilde_above_accountant, site.dp_epsilon),
            "every measured lower bound (canary, O(1), their f-DP readings, RM;RN) must be at "
            "most the guarantee; "
            "eps_tilde may be above it (a measurement, not a bound)",
        ),
    ]
    return (
        '<table id="privacy">'
        + th_row(("guarantee or check", "value", "what it is"))
        + "".join(
            _tr_open(name == "ordering check" and bool(site.bound_violations))
            + td(name, cls="text")
            + td(value)
            + td(what, cls="text")
            + "</tr>"
            for name, value, what in rows
        )
        + "</table>"
    )


def _tr_open(violation: bool) -> str:
    return '<tr class="violation">' if violation else "<tr>"


def _comparisons_table(site: SiteReport) -> str:
    dp = (
        f"{fmt(site.dp_epsilon, 2)} ({_DP_SOURCES.get(site.dp_epsilon_source or '', '')})"
        if site.dp_epsilon is not None
        else "off (no DP)"
    )
    rows = [
        (
            "RM;RN, one-sided",
            fmt_with_interval(site.rm_rn_eps_lb, site.rm_rn_eps_lb_interval),
            "the same attack against real held-out records of the site (c = 0): an eps lower bound",
        ),
        (
            "RM;RN, two-sided",
            fmt_with_interval(site.rm_rn_eps_lb_two_sided, site.rm_rn_eps_lb_two_sided_interval),
            "RM;RN counting 'non-member' guesses too",
        ),
        (
            "O(1)",
            fmt_with_interval(site.o1_eps_lb, site.o1_eps_lb_interval),
            "Steinke et al. (2023): loss-threshold guesses on real members and non-members",
        ),
        (
            "O(1), f-DP",
            fmt_fdp(site.o1_eps_lb_fdp, site.o1_fdp_mu, site.fdp_delta),
            "the same guesses against a Gaussian trade-off curve (Mahloujifar et al. 2025), "
            "mean over repeats",
        ),
        (
            "DP accountant epsilon",
            dp,
            "the training's record-level guarantee (an upper bound), if any",
        ),
        (
            "f loss members / holdout",
            fmt_loss_gap(site),
            "the model's mean loss on its members and on held-out records (generalization gap)",
        ),
    ]
    return (
        '<table id="comparisons">'
        + th_row(("comparison", "value [95% CI]", "what it is"))
        + "".join(
            "<tr>" + td(name, cls="text") + td(value) + td(what, cls="text") + "</tr>"
            for name, value, what in rows
        )
        + "</table>"
    )


def _low_fpr_table(site: SiteReport) -> str:
    headers = ("scorer", "AUC", *(f"TPR at {FPR_LABELS[k]} FPR" for k in TPR_FPR_KEYS))
    rows = []
    for scorer in SCORERS:
        tpr = getattr(site, f"{scorer}_tpr_at_fpr") or {}
        rows.append(
            "<tr>"
            + td(SCORER_LABELS[scorer], cls="text")
            + td(fmt(getattr(site, f"{scorer}_auc")))
            + "".join(td(fmt(tpr.get(k))) for k in TPR_FPR_KEYS)
            + "</tr>"
        )
    return '<table id="low-fpr">' + th_row(headers) + "".join(rows) + "</table>"


def _detail(site: SiteReport, result: AuditResult | None) -> list[str]:
    results = {site.site_id: result} if result is not None else {}
    reasons = scoped_reasons(site)
    levels = levels_lines([site])
    roc = result.roc if result is not None else {}
    n_repeats = len(result.repeats) if result is not None else 0
    return [
        meaning_block(),
        "<h3>Bounds per game and side</h3>",
        _bounds_table(site),
        *(
            ["<ul>" + "".join(f"<li>{esc(s)}: {esc(r)}</li>" for s, r in reasons) + "</ul>"]
            if reasons
            else []
        ),
        *([_list(levels)] if levels else []),
        figure(
            plots.site_eps_plot([site]),
            "eps_tilde one-sided and two-sided with their 95% t-intervals over repeats, the "
            "RM;RN and O(1) lower bounds, and (grey bar) the one-sided headroom ceiling - c_lb.",
            alt=f"eps_tilde, site {site.site_id}",
        ),
        "<h3>Comparisons</h3>",
        _comparisons_table(site),
        "<h3>Low false-positive rates</h3>",
        "<p>The share of members a scorer flags while wrongly flagging at most 1% / 0.1% of "
        "non-members (generated records for b and the MIA, real held-out records for RM;RN): "
        "does the attack find some records with near certainty?</p>",
        _low_fpr_table(site),
        figure(
            plots.roc_plot(site.site_id, roc, n_repeats),
            "True-positive rate against false-positive rate on log axes, mean over repeats; "
            "dotted: chance.",
            alt=f"log-scale ROC, site {site.site_id}",
        ),
        figure(
            plots.precision_recall_plot([site], results),
            "Precision against recall of b (blue, no access to the model) and of the MIA "
            "(red, sees the model), one line per repeat.",
            alt=f"precision-recall, site {site.site_id}",
        ),
        figure(
            plots.bound_recall_plot([site], results),
            "The bound at each recall level: c for b (blue), c+eps for the MIA (red); dashed: "
            "the ceiling.",
            alt=f"bound against recall, site {site.site_id}",
        ),
    ]


def _failed(site: SiteReport) -> str:
    return (
        f"<p>The audit {esc(site.status)}: "
        f'<span class="error">{esc(site.error or MISSING)}</span></p>'
    )


def _manifest(report: SitePageReport) -> str:
    m = report.manifest
    rows = [
        ("config file", m.config_file or "none (not found beside the audit)"),
        ("config sha256", m.config_sha256 or MISSING),
        ("run seed", fmt(m.run_seed)),
        ("audit seed (config)", fmt(m.audit_seed)),
        ("seeds of the audit's repeats", ", ".join(map(str, m.repeat_seeds)) or MISSING),
        *((f"{name} version", v or "not installed") for name, v in m.packages.items()),
        ("python", m.python),
        (
            "project commit",
            (m.git_commit or "unknown (not a git checkout)")
            + (" (with uncommitted changes)" if m.git_dirty else ""),
        ),
        *((f"size: {k}", str(v)) for k, v in m.data_sizes.items()),
    ]
    return (
        "<p>Versions and commit are those of the environment that wrote this page.</p>"
        '<table id="manifest">'
        + th_row(("item", "value"))
        + "".join("<tr>" + td(k, cls="text") + td(v, cls="text") + "</tr>" for k, v in rows)
        + "</table>"
    )
