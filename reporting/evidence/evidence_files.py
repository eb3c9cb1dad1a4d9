"""The evidence packs of a run as PDF files: the consortium's (``evidence.pdf``) and each
audited site's (``site-reports/site-<id>.pdf``, beside its page), from the run's files."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from panoramia_fl.contracts.run_files import RunLayout

from ..assembly.aggregate import build_report
from ..assembly.inputs import load_run
from ..assembly.manifest import build_manifest
from ..assembly.run_config import ReportConfig
from ..pages.pdf import print_pdf
from ..site.site_report import (
    build_site_page_report,
    platform_of,
    site_page_alone,
    site_report_paths,
)
from ..site.standing import consortium_standing
from .evidence_pack import consortium_pack_html, site_pack_html


@dataclass(frozen=True)
class EvidencePacks:
    """The packs written: the consortium's and the audited sites'."""

    consortium: Path
    sites: list[Path] = field(default_factory=list)


def site_pack_path(layout: RunLayout, site_id: int) -> Path:
    """Where a site's pack goes: beside its page."""
    return site_report_paths(layout, site_id).html_path.with_suffix(".pdf")


def write_evidence_packs(layout: RunLayout, config: ReportConfig) -> EvidencePacks:
    """The consortium's pack and each audited site's (with its standing band), printed."""
    inputs = load_run(layout, config)
    report = build_report(inputs)
    manifest = build_manifest(config, None, platform_of(layout))
    consortium = print_pdf(
        consortium_pack_html(report, manifest, run_name=config.name), layout.evidence_pdf
    )
    sites = []
    for site in report.sites:
        audit = inputs.audits.get(site.site_id)
        if audit is None:
            continue
        page = build_site_page_report(
            layout,
            site,
            audit.results.panoramia,
            config=config,
            standing=consortium_standing(site.site_id, report.sites),
            source="consortium",
        )
        html = site_pack_html(page, dp_level=config.privacy.dp_level)
        sites.append(print_pdf(html, site_pack_path(layout, site.site_id)))
    return EvidencePacks(consortium, sites)


def write_site_evidence_pack(layout: RunLayout, site_id: int, config: ReportConfig) -> Path:
    """One site's pack from its audit file alone (its standing then reads unavailable)."""
    page = site_page_alone(layout, site_id, config)
    html = site_pack_html(page, dp_level=config.privacy.dp_level)
    return print_pdf(html, site_pack_path(layout, site_id))
