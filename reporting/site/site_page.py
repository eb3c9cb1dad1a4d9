"""A site's own leakage report as a self-contained HTML page (``site-reports/site-<id>.html``).

Plain language first (the headline, what was measured, what it means, what it does not
show), the link to the site-local exposed records, the site's standing in the consortium
and the threat model: what a privacy officer reads. Then the detail a specialist checks
and the reproducibility manifest. The page embeds its JSON (:class:`~.schema.SitePageReport`)
like report.html does.
"""

from __future__ import annotations

from panoramia_fl.audit.panoramia.sides import SIDES
from panoramia_fl.audit.result import PanoramiaResult
from panoramia_fl.contracts.run_log import PlatformInfo

from ..gate.gate_blocks import gate_blocks
from ..layout.banners import input_canary_banner, violation_banner_lines
from ..layout.between_runs import HEADLINE, another_run_line
from ..layout.blocks import (
    Banner,
    Block,
    Bullets,
    Figure,
    Heading,
    Meaning,
    Para,
    Raw,
    Table,
    to_html,
)
from ..layout.gradient_canary_report import fmt_white_box_cost
from ..layout.site_columns import (
    BOUNDS_COLUMNS,
    BY_ROUND_COLUMNS,
    LOW_FPR_COLUMNS,
    PER_CLASS_COLUMNS,
    UPDATE_COLUMNS,
    Game,
    Item,
    item_columns,
)
from ..numbers.formatting import (
    MISSING,
    SIDE_LABELS,
    first_leaking_text,
    fmt,
    fmt_best,
    fmt_dp,
    fmt_est,
    fmt_fdp,
    fmt_input_canary,
    fmt_loss_gap,
    fmt_outside,
    fmt_two_sided,
    fmt_white_box,
    levels_lines,
    ordering_text,
    scoped_reasons,
    scorer_values,
)
from ..numbers.meanings import NOTES, Note
from ..numbers.metrics import (
    INPUT_CANARY_FDP,
    O1,
    O1_FDP,
    RM_RN,
    RM_RN_TWO_SIDED,
    mechanism,
    server,
)
from ..numbers.report_parts import report_parts
from ..pages import plots
from ..pages.html_page import esc, page
from ..privacy.privacy_ledger import server_epsilon
from ..schemas.schema import (
    SCORERS,
    ConsortiumStanding,
    ReproManifest,
    SitePageReport,
    SiteReport,
    mean_of,
    report_json,
)

_VERDICT_LABELS = {
    "evidence": "leakage measured",
    "flagged": "flagged: not a measurement of leakage",
    "inconclusive": "within noise of zero",
    "none": "no leakage measured",
    "no result": "no result",
}


def render_site_page(report: SitePageReport) -> str:
    """The HTML text of a site's report, section by section (the audit's per-record scores
    are never used)."""
    site, reading = report.site, report.reading
    title = f"Leakage report for site {site.site_id}" + (
        f" - {report.run_name}" if report.run_name else ""
    )
    canaries = site.privacy.canaries
    blocks: list[Block] = [
        Heading(title, 1),
        Banner("violation", violation_banner_lines(site.checks.bound_violations)),
        Banner("canaries", [input_canary_banner(canaries)] if canaries else []),
        Para(
            "How much the consortium's final shared model reveals about this site's own "
            "training records, measured at the site with PANORAMIA. "
            + (
                "Written by the consortium's report aggregator."
                if report.source == "consortium"
                else "Rebuilt by the site from its own audit file alone."
            )
        ),
        Raw(headline_box(report)),
        *gate_blocks(report.gate),
        *_between_runs(report),
        Heading("What was measured"),
        Bullets(reading.measured),
        Heading("What it means for your records"),
        Bullets(reading.meaning),
        Heading("What it does not show"),
        Bullets(reading.not_shown),
        *_exposed(report),
        *kind_sections(report),
        *_model_checks(report),
        Heading("Where your site stands in the consortium"),
        Bullets(standing_lines(report.standing)),
        Heading("Threat model"),
        Bullets(report.threat_model, ordered=True),
        *by_round_blocks(site),
        *update_blocks(site),
        *_per_class(site.panoramia),
        Heading("Detail"),
        *(_detail(site, site.panoramia) if site.panoramia is not None else [_failed(site)]),
        Heading("Privacy guarantees and the ordering check", 3),
        _privacy_table(site),
        Heading("Reproducibility"),
        Para("Versions and commit are those of the environment that wrote this page."),
        manifest_table(report.manifest),
    ]
    return page(title, to_html(blocks), data=report_json(report))


def kind_sections(report: SitePageReport) -> list[Block]:
    """Each other kind of audit's section (its part of the reports), in the parts' order."""
    parts = [part.site_section for part in report_parts() if part.site_section is not None]
    return [block for section in parts for block in section(report)]


def headline_box(report: SitePageReport) -> str:
    """The verdict of the site's reading, its two headline numbers and the sentence."""
    site, reading = report.site, report.reading
    verdict = reading.verdict
    numbers = ""
    if site.panoramia is not None:
        two = fmt_two_sided(site) if site.panoramia.two_sided else "- (audit predates it)"
        numbers = (
            '<div class="numbers">'
            f'<div><div class="label">eps_tilde, two-sided [95% CI] (side)</div>'
            f'<div class="value" id="eps-tilde-two-sided">{esc(two)}</div></div>'
            f'<div><div class="label">eps_tilde, one-sided (the paper\'s) [95% CI]</div>'
            f'<div class="value" id="eps-tilde">'
            f"{esc(fmt_est(site.panoramia.one_sided.eps_tilde))}</div></div>"
            "</div>"
        )
    return (
        '<div class="headline">'
        f'<span class="verdict {esc(verdict.replace(" ", "-"))}">'
        f"{esc(_VERDICT_LABELS[verdict])}</span>"
        f"{numbers}<p>{esc(reading.headline)}</p></div>"
    )


def _between_runs(report: SitePageReport) -> list[Block]:
    """Which interval is which: this model's, and (with replicates) another run's."""
    if report.site.panoramia is None:
        return []
    numbers = report.between_runs.numbers if report.between_runs is not None else {}
    another = another_run_line(numbers[HEADLINE]) if HEADLINE in numbers else None
    return [Para(f"{NOTES[Note.ONE_MODEL_INTERVAL]}."), *([Para(another)] if another else [])]


def _exposed(report: SitePageReport) -> list[Block]:
    if report.exposed_records_link is None:
        return []
    link = esc(report.exposed_records_link)
    return [
        Heading("Your most exposed records (site-local)"),
        Raw(
            '<p class="site-local">Your site kept its own list of the members the model '
            f'exposes most, with their scores: <a href="{link}">{link}</a>. It stays at your '
            "site: it is never sent to the server, and neither this page nor the consortium "
            "report copies its content.</p>"
        ),
    ]


def _model_checks(report: SitePageReport) -> list[Block]:
    """The received models this site's checks flagged (fl.model_checks)."""
    if not report.model_checks:
        return []
    done = {True: "refused: trained nothing, sent nothing", False: "recorded, trained anyway"}
    return [
        Heading("Models the server sent that your site's checks flagged"),
        Bullets(
            [
                f"Round {r.server_round} ({done[r.refused]}): "
                + "; ".join(o.sentence() for o in r.flagged)
                for r in report.model_checks
            ]
        ),
    ]


def standing_lines(st: ConsortiumStanding) -> list[str]:
    """Where the site stands: its rank and band, and what the page does not show."""
    lines = []
    if st.rank is not None and st.n_ranked is not None:
        others = st.rank - 1
        lines.append(
            f"Your site ranks {st.rank} of {st.n_ranked} by two-sided eps_tilde (1 = the most "
            f"leakage measured): {st.band}. {others} other site{'s' * (others != 1)} measured "
            "at least as much as yours."
        )
    return [*lines, st.note]


def by_round_blocks(
    site: SiteReport, *, level: int = 2, title: str = "Leakage over rounds"
) -> list[Block]:
    """Leakage over rounds: when it first shows, the plot and the table; empty when only
    the final model was audited (the consortium report shows it per site, one level down)."""
    if not site.by_round:
        return []
    return [
        Heading(title, level),
        Para(f"{first_leaking_text(site.by_round)} {NOTES[Note.BY_ROUND]}"),
        Figure(
            plots.by_round_plot(site.by_round),
            NOTES[Note.BY_ROUND_CAPTION],
            alt=f"leakage against round, site {site.site_id}",
        ),
        Table(BY_ROUND_COLUMNS, site.by_round, attrs=f' id="by-round-{site.site_id}"'),
    ]


def update_blocks(
    site: SiteReport, *, level: int = 2, title: str = "Leakage of your own updates"
) -> list[Block]:
    """The audits of the site's own updates beside the same rounds' global models (the
    plot and the table); empty when none was audited (``audit.updates``)."""
    rows = site.update_rows()
    if not rows:
        return []
    return [
        Heading(title, level),
        Para(NOTES[Note.UPDATES]),
        Figure(
            plots.updates_plot(rows),
            NOTES[Note.UPDATES_CAPTION],
            alt=f"leakage of the site's updates against round, site {site.site_id}",
        ),
        Table(UPDATE_COLUMNS, rows, attrs=f' id="updates-{site.site_id}"'),
    ]


def _per_class(audit: PanoramiaResult | None) -> list[Block]:
    if audit is None or not audit.per_class:
        return []
    return [
        Heading("Which of your classes are exposed"),
        Para(NOTES[Note.CLASS_SLICES]),
        Table(PER_CLASS_COLUMNS, audit.per_class, attrs=' id="per-class"'),
    ]


def _bounds_table(audit: PanoramiaResult) -> Table:
    games = [Game("one-sided (the paper's)", audit.one_sided, audit.levels.get("c_lb"))]
    two = audit.two_sided
    if two is not None:
        games += [
            Game(f"two-sided: {SIDE_LABELS[side]} side", getattr(two, side), two.beta)
            for side in SIDES
        ]
    return Table(BOUNDS_COLUMNS, games, attrs=' id="bounds"')


_DP_SOURCES = {
    "audit": "record-level accountant, from your audit",
    "metrics": "record-level accountant, from the training log",
}


def _privacy_table(site: SiteReport) -> Table:
    """Every guarantee that speaks for the site's records, the canary audit and the check."""
    violated = bool(site.checks.bound_violations)
    return Table(
        item_columns("guarantee or check", "value"),
        [*guarantee_items(site), *_measured_items(site)],
        attrs=' id="privacy"',
        row_class=lambda i: "violation" if violated and i.name == "ordering check" else None,
    )


def guarantee_items(site: SiteReport) -> list[Item]:
    """The DP guarantees that speak for the site's records, each with what it covers."""
    p = site.privacy
    client_what = "; ".join(
        x for x in (p.client_accountant, p.client_sampling, p.client_neighboring_relation) if x
    )
    return [
        Item(
            "DP guarantee for your records",
            fmt_dp(p.dp_epsilon, p.dp_delta, _DP_SOURCES.get(p.dp_epsilon_source or ""))
            if p.dp_epsilon is not None
            else "off (no DP)",
            NOTES[Note.RECORD_GUARANTEE],
        ),
        Item(
            "record-level accountant (DP-SGD at your site)",
            fmt_dp(p.dp_epsilon, p.dp_delta, p.record_accountant),
            NOTES[Note.RECORD_ACCOUNTANT],
        ),
        Item(
            "client-level accountant, site level",
            fmt_dp(p.client_epsilon, p.client_delta, client_what or None),
            NOTES[Note.CLIENT_ACCOUNTANT],
        ),
        Item(
            "DP guarantee for your records against the server",
            fmt(server_epsilon(p)) if server_epsilon(p) is not None else "none",
            NOTES[Note.SERVER_GUARANTEE],
        ),
        Item(
            "client-level DP, implied per record",
            fmt(p.client_epsilon_record) if p.client_epsilon_record is not None else "off",
            NOTES[Note.CLIENT_IMPLIED_RECORD],
        ),
    ]


def _measured_items(site: SiteReport) -> list[Item]:
    """What was measured against those guarantees: the canary and white-box audits, the best
    lower bound, the ordering check and what was sent outside the guarantee."""
    p, c = site.privacy, site.checks
    canary = site.results.input_canaries
    return [
        Item(
            "canary audit eps lower bound [interval]",
            fmt_input_canary(canary, p.canaries),
            NOTES[Note.INPUT_CANARY_BOUND],
        ),
        Item(
            "canary audit f-DP eps lower bound",
            fmt_fdp(
                INPUT_CANARY_FDP.value(site),
                None if canary is None else canary.fdp_mu,
                c.fdp_delta,
            ),
            NOTES[Note.INPUT_CANARY_FDP],
        ),
        Item(
            "white-box, mechanism level: f-DP eps lower bound / estimate [95% interval]",
            fmt_white_box(mechanism(site)),
            NOTES[Note.WHITE_BOX],
        ),
        Item(
            "white-box, server level: f-DP eps lower bound / estimate [95% interval]",
            fmt_white_box(server(site)),
            NOTES[Note.WHITE_BOX_SERVER],
        ),
        Item(
            "white-box canaries and their cost",
            fmt_white_box_cost(site.results.gradient_canaries),
            NOTES[Note.WHITE_BOX_COST],
        ),
        Item(
            "best lower bound",
            fmt_best(c.best_eps_lb, c.best_eps_lb_method),
            NOTES[Note.BEST_LOWER_BOUND],
        ),
        Item(
            "ordering check",
            ordering_text(site),
            f"{NOTES[Note.BOUNDS_BELOW_DP]}; {NOTES[Note.NOT_A_BOUND]}",
        ),
        Item("sent outside the guarantee", fmt_outside(p), NOTES[Note.OUTSIDE]),
    ]


def _comparisons_table(site: SiteReport, audit: PanoramiaResult) -> Table:
    p = site.privacy
    dp = (
        f"{fmt(p.dp_epsilon, 2)} ({_DP_SOURCES.get(p.dp_epsilon_source or '', '')})"
        if p.dp_epsilon is not None
        else "off (no DP)"
    )
    items = [
        *(
            Item(name, fmt_est(m.get(site)), m.gloss)
            for name, m in (("RM;RN, one-sided", RM_RN), ("RM;RN, two-sided", RM_RN_TWO_SIDED))
        ),
        Item("O(1)", fmt_est(O1.get(site)), O1.gloss),
        Item(
            "O(1), f-DP",
            fmt_fdp(O1_FDP.value(site), mean_of(audit.o1_fdp_mu), site.checks.fdp_delta),
            O1_FDP.gloss,
        ),
        Item(
            "DP accountant epsilon",
            dp,
            NOTES[Note.DP_ACCOUNTANT],
        ),
        Item(
            "f loss members / holdout",
            fmt_loss_gap(site),
            NOTES[Note.LOSS_GAP],
        ),
    ]
    return Table(item_columns("comparison", "value [95% CI]"), items, attrs=' id="comparisons"')


def _detail(site: SiteReport, audit: PanoramiaResult) -> list[Block]:
    return [
        Meaning(),
        Heading("Bounds per game and side", 3),
        _bounds_table(audit),
        Bullets([f"{s}: {r}" for s, r in scoped_reasons(site)]),
        Bullets(levels_lines([site])),
        Figure(
            plots.site_eps_plot([site]),
            NOTES[Note.EPS_PLOT_CAPTION],
            alt=f"eps_tilde, site {site.site_id}",
        ),
        Heading("Comparisons", 3),
        _comparisons_table(site, audit),
        Heading("Low false-positive rates", 3),
        Para(NOTES[Note.LOW_FPR]),
        Table(LOW_FPR_COLUMNS, [(s, scorer_values(audit, s)) for s in SCORERS], ' id="low-fpr"'),
        Figure(
            plots.roc_plot(site.site_id, audit.roc, len(audit.repeats)),
            NOTES[Note.ROC],
            alt=f"log-scale ROC, site {site.site_id}",
        ),
        Figure(
            plots.precision_recall_plot([site]),
            NOTES[Note.PR_CAPTION],
            alt=f"precision-recall, site {site.site_id}",
        ),
        Figure(
            plots.bound_recall_plot([site]),
            NOTES[Note.BOUND_RECALL_CAPTION],
            alt=f"bound against recall, site {site.site_id}",
        ),
    ]


def _failed(site: SiteReport) -> Block:
    return Raw(
        f"<p>The audit {esc(site.status)}: "
        f'<span class="error">{esc(site.error or MISSING)}</span></p>'
    )


def manifest_table(m: ReproManifest) -> Table:
    """What it takes to reproduce the numbers: config digest, seeds, versions, platform."""
    items = [
        Item("config file", m.config_file or "none (not found beside the audit)"),
        Item("config sha256", m.config_sha256 or MISSING),
        Item("run seed", fmt(m.run_seed)),
        Item("audit seed (config)", fmt(m.audit_seed)),
        Item("seeds of the audit's repeats", ", ".join(map(str, m.repeat_seeds)) or MISSING),
        *(Item(f"{name} version", v or "not installed") for name, v in m.packages.items()),
        Item("python", m.python),
        Item(
            "project commit",
            (m.git_commit or "unknown (not a git checkout)")
            + (" (with uncommitted changes)" if m.git_dirty else ""),
        ),
        *(Item(f"size: {k}", str(v)) for k, v in m.data_sizes.items()),
        *_platform_items(m.platform),
    ]
    return Table(item_columns("item", "value", what=None), items, attrs=' id="manifest"')


def _platform_items(p: PlatformInfo | None) -> list[Item]:
    """The machine that trained the run: its numbers are reproduced exactly only there."""
    if p is None:
        return [Item("trained on", "unknown (the run predates platform.json)")]
    beside = p.evaluation_threads_beside_training
    evaluation = "" if beside is None else f" ({beside} beside the sites' training)"
    return [
        Item(
            "trained on CPU",
            f"{p.cpu_model or MISSING} ({p.cpu_count} cores, "
            f"{p.cpu_capability or MISSING}); {p.system or MISSING}",
        ),
        Item(
            "torch build",
            f"{p.torch or MISSING} (git {p.torch_git or MISSING}; CUDA build "
            f"{p.torch_cuda_build or 'none'})",
        ),
        Item(
            "threads",
            f"torch {fmt(p.torch_threads)} intra-op{evaluation} / "
            f"{fmt(p.torch_interop_threads)} inter-op in the harness, {fmt(p.site_torch_threads)}"
            f" per site; OMP_NUM_THREADS {p.omp_num_threads or 'unset'}",
        ),
        Item("CUDA used", p.cuda_device or "no (trained on the CPU)"),
    ]
