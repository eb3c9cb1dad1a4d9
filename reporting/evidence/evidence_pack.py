"""The evidence pack: a run's audits as a document a privacy officer files with a data
protection impact assessment, one per site and one for the consortium, printed to PDF
(:mod:`.pdf`).

Its sections, in the order such an officer reads them (docs/evidence.md): the verdict
against the release policy; the attacks tried, each with its threat model, its result with
its interval and meaning, and what it cannot show; the design choices (DP level,
accountants, the DP-SGD conformance checks, secure aggregation); the residual risk and its
limits; reproducibility. Every number comes from the metric registry (:mod:`.metrics`) and
every sentence from :mod:`.meanings` or :mod:`.plain_language`. A site's pack holds only
that site's numbers and its standing band, as its own page does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from panoramia_fl.contracts.dp_level import SecureAggregationMode

from ..gate.gate_blocks import gate_blocks
from ..layout.attribute_report import ATTRIBUTE_ADVANTAGE, ATTRIBUTE_EPS_LB
from ..layout.blocks import Block, Bullets, Figure, Heading, Para, Raw, Table, to_html
from ..layout.columns import HEADLINE_COLUMNS, Column, column, site_row_class
from ..layout.gradient_canary_report import CONFORMANCE_COLUMNS
from ..layout.inversion_report import INVERSION_SHARE_REBUILT, inversion_sentence
from ..layout.site_columns import Item, item_columns
from ..numbers.formatting import MISSING, fmt_est
from ..numbers.meanings import NOTES, THREAT_MODEL, Note
from ..numbers.metrics import (
    CLIENT_EPS_LB,
    DISHONEST_SERVER,
    EPS_TILDE,
    EPS_TILDE_TWO_SIDED,
    INPUT_CANARY,
    INPUT_CANARY_FDP,
    MECHANISM_ESTIMATE,
    MECHANISM_FDP,
    O1,
    O1_FDP,
    RM_RN_TWO_SIDED,
    SERVER_FDP,
    Metric,
)
from ..numbers.plain_language import conformance_sentence
from ..pages import plots
from ..pages.html_page import page
from ..schemas.schema import ReproManifest, RunReport, SitePageReport, SiteReport, report_json
from ..site.site_page import guarantee_items, headline_box, manifest_table, standing_lines

PRINT_STYLE = """
@page { size: A4; margin: 16mm 14mm; }
body { max-width: none; margin: 0; padding: 0; font-size: 10pt; }
h1 { font-size: 17pt; } h2 { font-size: 13.5pt; break-after: avoid; }
h3 { font-size: 11.5pt; break-after: avoid; }
table, figure, .headline { break-inside: avoid; }
table { font-size: 8.5pt; width: 100%; } th { text-align: left; } .wide { overflow: visible; }
.plot svg { max-width: 100%; max-height: 95mm; }
"""
"""The pack's print layout: A4, tables and figures kept whole on a page."""


@dataclass(frozen=True)
class Attack:
    """An attack a run can try on a site's records, as the pack tells it."""

    name: str
    threat: Callable[[SecureAggregationMode], list[str]]
    """Who holds what, and what they try (under the run's secure aggregation)."""
    metrics: tuple[Metric, ...]
    """Its results, each from the registry."""
    meaning: Note
    limits: tuple[Note, ...]
    """What it cannot show."""
    ran: Callable[[SiteReport], bool]


def _notes(*keys: Note) -> Callable[[SecureAggregationMode], list[str]]:
    return lambda secure: [NOTES[k] for k in keys]


ATTACKS: tuple[Attack, ...] = (
    Attack(
        "Membership inference on the released model (PANORAMIA)",
        _notes(*THREAT_MODEL[:2]),
        (EPS_TILDE_TWO_SIDED, EPS_TILDE, RM_RN_TWO_SIDED, O1, O1_FDP),
        Note.READ_AS_LOWER_BOUND,
        (Note.NOT_PROOF, Note.LOWER_BOUND_WHEN, Note.ONE_MODEL_INTERVAL),
        lambda s: s.panoramia is not None,
    ),
    Attack(
        "Canary records (one-run audit)",
        _notes(Note.CANARY_THREAT),
        (INPUT_CANARY, INPUT_CANARY_FDP),
        Note.INPUT_CANARY_BOUND,
        (Note.CANARY_LIMITS,),
        lambda s: s.results.input_canaries is not None,
    ),
    Attack(
        "Gradient canaries inside DP-SGD (what the server could learn)",
        _notes(Note.WHITE_BOX_THREAT),
        (MECHANISM_FDP, MECHANISM_ESTIMATE, SERVER_FDP),
        Note.WHITE_BOX,
        (Note.WHITE_BOX_LIMITS,),
        lambda s: s.results.gradient_canaries is not None,
    ),
    Attack(
        "Rebuilding records from what the server holds (gradient inversion)",
        lambda secure: [
            NOTES[Note.INVERSION_THREAT_SUM if secure == "ideal" else Note.INVERSION_THREAT]
        ],
        (INVERSION_SHARE_REBUILT,),
        Note.INVERSION,
        (Note.INVERSION_LIMITS,),
        lambda s: bool(s.results.inversion),
    ),
    Attack(
        "Crafted models from a server that does not play fair",
        _notes(Note.DISHONEST_THREAT),
        (DISHONEST_SERVER,),
        Note.DISHONEST_SERVER,
        (Note.DISHONEST_LIMITS,),
        lambda s: bool(s.results.dishonest_server),
    ),
    Attack(
        "Inferring a sensitive field (attribute inference)",
        _notes(Note.ATTRIBUTE_THREAT),
        (ATTRIBUTE_EPS_LB, ATTRIBUTE_ADVANTAGE),
        Note.ATTRIBUTE_INFERENCE,
        (Note.ATTRIBUTE_LIMITS, Note.NOT_PROOF),
        lambda s: s.results.attribute_inference is not None,
    ),
    Attack(
        "Canary clients (client-level DP)",
        _notes(Note.CLIENT_CANARY_THREAT),
        (CLIENT_EPS_LB,),
        Note.CLIENT_CANARIES,
        (),
        lambda s: s.privacy.client_eps_lb is not None,
    ),
)
"""Every attack the pack can report, in its order; an attack a run adds is one entry."""


def _result_items(attack: Attack, site: SiteReport) -> list[Item]:
    return [Item(m.title, fmt_est(m.get(site)), m.gloss) for m in attack.metrics]


def _metric_column(m: Metric) -> Column[SiteReport]:
    return column(f"{m.label} [95% CI]", lambda s: fmt_est(m.get(s)))


def _attack_blocks(
    attack: Attack, sites: list[SiteReport], secure: SecureAggregationMode, *, own: bool
) -> list[Block]:
    """One attack: its threat model, its results (the site's as items; the consortium's
    one row per site), what they mean and what they cannot show."""
    ran = [s for s in sites if attack.ran(s)]
    if not ran:
        return []
    results: Block = (
        Table(item_columns("result", "value [95% CI]"), _result_items(attack, ran[0]))
        if own
        else Table(
            (column("site", lambda s: str(s.site_id)), *map(_metric_column, attack.metrics)),
            ran,
        )
    )
    rounds = [inversion_sentence(r) for s in ran for r in s.results.inversion] if own else []
    return [
        Heading(attack.name, 3),
        Para("Threat model. " + " ".join(attack.threat(secure))),
        results,
        *([Para(" ".join(rounds))] if rounds else []),
        Para("What it means. " + NOTES[attack.meaning]),
        *([Bullets([NOTES[n].rstrip(".") + "." for n in attack.limits])] if attack.limits else []),
    ]


def _attacks(
    sites: list[SiteReport], secure: SecureAggregationMode, *, own: bool, lead: list[Block]
) -> list[Block]:
    """Each attack that ran, after ``lead`` (the headline)."""
    blocks = [b for a in ATTACKS for b in _attack_blocks(a, sites, secure, own=own)]
    return [Heading("Attacks tried"), *lead, *blocks]


def _design(
    sites: list[SiteReport], dp_level: str | None, secure: SecureAggregationMode
) -> list[Block]:
    """The design choices: DP level, each site's guarantees and accountants, its DP-SGD
    conformance checks, secure aggregation."""
    blocks: list[Block] = [
        Heading("Design choices"),
        Bullets(
            [
                f"DP level: {dp_level or MISSING}.",
                "Secure aggregation: "
                + (
                    NOTES[Note.SECURE_AGGREGATION_IDEAL]
                    if secure == "ideal"
                    else NOTES[Note.SECURE_AGGREGATION_NONE]
                ),
            ]
        ),
    ]
    for site in sites:
        canaries = site.results.gradient_canaries
        result = None if canaries is None else canaries.conformance
        blocks += [
            Heading(f"Site {site.site_id}: guarantees and the DP-SGD conformance checks", 3),
            Table(item_columns("guarantee", "value"), guarantee_items(site)),
            Para(NOTES[Note.NO_CONFORMANCE] if result is None else conformance_sentence(result)),
            *([Table(CONFORMANCE_COLUMNS, list(result.checks))] if result else []),
        ]
    return blocks


def _reproducibility(manifest: ReproManifest) -> list[Block]:
    return [
        Heading("Reproducibility"),
        Para("Versions and commit are those of the environment that wrote this pack."),
        manifest_table(manifest),
    ]


def _opening(title: str) -> list[Block]:
    written = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return [Heading(title, 1), Para(f"{NOTES[Note.PACK_INTRO]} Written {written}.")]


def site_pack_html(report: SitePageReport, *, dp_level: str | None) -> str:
    """A site's evidence pack as a printable page: its own numbers and standing alone."""
    site, reading = report.site, report.reading
    title = f"Evidence pack: site {site.site_id}" + (
        f" - {report.run_name}" if report.run_name else ""
    )
    blocks: list[Block] = [
        *_opening(title),
        *gate_blocks(report.gate, none=NOTES[Note.NO_POLICY]),
        *_attacks([site], report.secure_aggregation, own=True, lead=[Raw(headline_box(report))]),
        Heading("What the membership reading means for your records", 3),
        Bullets(reading.meaning),
        *_figures(site),
        *_design([site], dp_level, report.secure_aggregation),
        Heading("Residual risk and its limits"),
        Bullets([*reading.not_shown, NOTES[Note.THREAT_NOT_COVERED]]),
        Heading("Where your site stands in the consortium", 3),
        Bullets(standing_lines(report.standing)),
        *_reproducibility(report.manifest),
    ]
    return page(title, to_html(blocks), data=report_json(report), style=PRINT_STYLE)


def _figures(site: SiteReport) -> list[Block]:
    if site.panoramia is None:
        return []
    return [
        Figure(
            plots.site_eps_plot([site]),
            NOTES[Note.EPS_PLOT_CAPTION],
            alt=f"eps_tilde, site {site.site_id}",
        )
    ]


def consortium_pack_html(
    report: RunReport, manifest: ReproManifest, *, run_name: str | None
) -> str:
    """The consortium's evidence pack as a printable page: every site's numbers."""
    title = "Evidence pack: the consortium" + (f" - {run_name}" if run_name else "")
    sites = report.sites
    blocks: list[Block] = [
        *_opening(title),
        *gate_blocks(report.gate, none=NOTES[Note.NO_POLICY]),
        *_attacks(
            sites,
            report.secure_aggregation,
            own=False,
            lead=[
                Table(HEADLINE_COLUMNS, sites, attrs=' id="headline"', row_class=site_row_class),
                Para(NOTES[Note.HEADLINE]),
            ],
        ),
        Figure(plots.site_eps_plot(sites), NOTES[Note.EPS_PLOT_CAPTION], alt="eps_tilde per site"),
        *_design(sites, report.dp_level, report.secure_aggregation),
        Heading("Residual risk and its limits"),
        Bullets(
            [
                NOTES[Note.NOT_PROOF],
                NOTES[Note.LOWER_BOUND_WHEN],
                NOTES[Note.READ_AS_LOWER_BOUND],
                f"{NOTES[Note.ONE_MODEL_INTERVAL]}.",
                NOTES[Note.THREAT_NOT_COVERED],
            ]
        ),
        *_reproducibility(manifest),
    ]
    return page(title, to_html(blocks), data=report_json(report), style=PRINT_STYLE)
