"""The gradient-inversion audit (``audit.inversion``) in the reports, in one place: its
number, its plain sentence, its cell in the sweep's and the observers' tables, its rows and
section on a site's own page, and its line of the site's threat model (its part of the
reports, :data:`~.report_parts.REPORT_PARTS`)."""

from __future__ import annotations

from panoramia_fl.audit.inversion.inversion_result import InversionResult
from panoramia_fl.contracts.dp_level import SecureAggregationMode

from ..numbers.formatting import MISSING, fmt
from ..numbers.meanings import NOTES, Note
from ..numbers.metrics import Metric
from ..numbers.report_parts import REPORT_PARTS, ReportPart
from ..schemas.schema import SitePageReport, SiteReport
from ..schemas.sweep_schema import SweepPointReport
from .blocks import Block, Table
from .columns import Column, column
from .rebuilt_records import Gallery, rebuilt_records_section

INVERSION_SHARE_REBUILT = Metric(
    "inversion_share_rebuilt",
    "share rebuilt by gradient inversion",
    lambda s: max((r.share_rebuilt for r in s.results.inversion), default=None),
    name="the largest share of the site's records the server's gradient inversion rebuilt "
    "(over the attacked rounds)",
    unit="fraction",
    gloss="records whose best reconstruction is at or above the measure's threshold",
)


def fmt_inversion(result: InversionResult | None) -> str:
    """``mean (baseline mean)`` of an inversion audit's quality measure, with the share
    rebuilt: e.g. ``SSIM 0.85 (baseline 0.31); 100% >= 0.6``."""
    if result is None:
        return MISSING
    name = "SSIM" if result.measure == "ssim" else "fields"
    return (
        f"{name} {fmt(result.quality_mean, 2)} (baseline {fmt(result.baseline_quality_mean, 2)})"
        f"; {result.share_rebuilt:.0%} >= {fmt(result.threshold, 2)}"
        + ("; cut by the time guard" if result.cut_short else "")
    )


def inversion_sentence(result: InversionResult) -> str:
    """One plain sentence: could the server rebuild the site's records in that round?"""
    what = "images" if result.measure == "ssim" else "rows"
    gap = result.quality_mean - result.baseline_quality_mean
    head = (
        f"From your round-{result.round} update ({result.attack}, {result.n_records:,} "
        f"records), a curious server rebuilt {result.share_rebuilt:.0%} of the {what} scored "
        f"at {'SSIM' if result.measure == 'ssim' else 'a share of fields right'} >= "
        f"{fmt(result.threshold, 2)}, against {result.baseline_share_rebuilt:.0%} for an "
        "update from public records"
    )
    if gap >= 0.1 and result.share_rebuilt > result.baseline_share_rebuilt:
        reading = ": well above chance, so your records can be rebuilt from what you send."
    elif gap > 0.02:
        reading = ": a little above chance; no record is clearly rebuilt."
    else:
        reading = ": no better than chance, so no record could be rebuilt this way."
    if not result.cut_short:
        return head + reading
    return (
        head
        + reading
        + (
            " The time guard (audit.inversion.time_limit_s) stopped the attack or its baseline "
            f"short of its {result.step_budget or 0:,} steps (the attack took "
            f"{result.iterations:,}), so this reading depends on this machine's speed."
        )
    )


def _first_inversion(site: SiteReport) -> InversionResult | None:
    return site.results.inversion[0] if site.results.inversion else None


def inversion_cell(site: SiteReport, point: SweepPointReport) -> str:
    """The site's first attacked round; where other sites of the point ran the attack and
    this one did not (``audit.inversion.sites``), which did; "off" where none did."""
    first = _first_inversion(site)
    if first is not None or site.status != "ok":
        return fmt_inversion(first)
    attacked = [s.site_id for s in point.sites if s.results.inversion]
    if not attacked:
        return "off"
    return f"not run at this site (audit.inversion.sites: {', '.join(map(str, attacked))})"


def _inversion_cost(r: InversionResult) -> str:
    """``loss / steps of budget / s``; ``(cut)`` where the time guard stopped an attack."""
    steps = f"{r.iterations:,}" + ("" if r.step_budget is None else f" of {r.step_budget:,}")
    cut = " (cut by the time guard)" if r.cut_short else ""
    return f"{fmt(r.match_loss, 3)} / {steps}{cut} / {r.seconds:.0f}"


INVERSION_COLUMNS: tuple[Column[InversionResult], ...] = (
    column("round", lambda r: str(r.round)),
    column("attack", lambda r: r.attack, cls="text"),
    column("records in the update / scored", lambda r: f"{r.n_records:,} / {r.n_scored:,}"),
    column(
        "quality mean / median / max",
        lambda r: (
            f"{fmt(r.quality_mean, 3)} / {fmt(r.quality_median, 3)} / {fmt(r.quality_max, 3)}"
        ),
    ),
    column("rebuilt (>= threshold)", lambda r: f"{r.share_rebuilt:.0%} (>= {fmt(r.threshold, 2)})"),
    column("PSNR dB", lambda r: fmt(r.psnr_mean, 1)),
    column(
        "baseline: quality mean / max / rebuilt / PSNR",
        lambda r: (
            f"{fmt(r.baseline_quality_mean, 3)} / {fmt(r.baseline_quality_max, 3)} / "
            f"{r.baseline_share_rebuilt:.0%} / {fmt(r.baseline_psnr_mean, 1)}"
        ),
    ),
    column("restarts' agreement (rows)", lambda r: fmt(r.agreement, 2)),
    column("record-level DP eps", lambda r: fmt(r.dp_epsilon)),
    column("attack: match loss / steps of its budget / s", _inversion_cost),
)
"""A site's inversion audit, one row per attacked round (its own page)."""


def inversion_section(report: SitePageReport) -> list[Block]:
    """Could the server rebuild the site's records from its updates (audit.inversion)?"""
    results = report.site.results.inversion
    if not results:
        return []
    held = "the round's sum" if report.secure_aggregation == "ideal" else "your updates"
    return rebuilt_records_section(
        heading=f"Can the server rebuild your records from {held}?",
        sentence=" ".join(inversion_sentence(r) for r in results),
        how_to_read=NOTES[Note.INVERSION],
        table=Table(INVERSION_COLUMNS, results, attrs=' id="inversion"'),
        link=report.inversion_gallery_link,
        gallery=Gallery(
            alt="your records beside their reconstructions",
            caption="Your site's own gallery (site-local, linked, never sent): the "
            "best-rebuilt and a typical record of the first attacked round, each as original "
            "| the attack's reconstruction | the baseline's (public records) best match.",
        ),
    )


def inversion_threat(site: SiteReport, secure: SecureAggregationMode) -> list[str]:
    """The inversion audit's threat, on what the server held; none without the audit."""
    if not site.results.inversion:
        return []
    return [NOTES[Note.INVERSION_THREAT_SUM] if secure == "ideal" else NOTES[Note.INVERSION_THREAT]]


REPORT_PARTS.register("inversion")(
    ReportPart(
        metrics=(INVERSION_SHARE_REBUILT,),
        rebuilt=(INVERSION_SHARE_REBUILT,),
        site_section=inversion_section,
    )
)
