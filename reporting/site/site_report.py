"""Each site's own leakage report: ``RUN_DIR/site-reports/site-<id>.json`` and ``.html``.

The aggregator writes one per site with an audit file, beside the consortium report, with
the site's standing in the consortium. A site rebuilds its own from its audit file alone
(:func:`write_site_report`), with no other site's results; its standing then reads
"unavailable". Neither reads the site-local exposed-records file: it is only linked.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Literal

from panoramia_fl.audit.result import PanoramiaResult
from panoramia_fl.contracts.errors import RunFileError
from panoramia_fl.contracts.files import atomic_write_text
from panoramia_fl.contracts.model_flags import CheckRecord, read_check_records
from panoramia_fl.contracts.run_files import (
    RunLayout,
    exposed_records_name,
    inversion_gallery_name,
    model_checks_name,
    rebuilt_gallery_name,
)
from panoramia_fl.contracts.run_log import ClientDPFile, PlatformInfo, read_record, read_rounds

from ..assembly.aggregate import site_report
from ..assembly.inputs import RunInputs, load_replicates, load_site_audit
from ..assembly.manifest import build_manifest
from ..assembly.run_config import ReportConfig
from ..assembly.writers import report_to_json_text
from ..gate.gate import site_gate_lines, verdict_of
from ..layout.banners import violation_warnings
from ..layout.inversion_report import inversion_threat
from ..numbers.meanings import NOTES, THREAT_MODEL
from ..numbers.plain_language import plain_reading
from ..schemas.replicate_schema import ReplicateSite
from ..schemas.schema import (
    SCHEMA_VERSION,
    ConsortiumStanding,
    ReportFiles,
    RunReport,
    SitePageReport,
    SiteReport,
)
from .site_page import render_site_page
from .standing import consortium_standing, standing_unavailable


def site_report_paths(layout: RunLayout, site_id: int) -> ReportFiles:
    """Where a site's report goes: ``site-reports/site-<id>.json`` and ``.html``."""
    base = layout.site_reports / f"site-{site_id}"
    return ReportFiles(json_path=base.with_suffix(".json"), html_path=base.with_suffix(".html"))


def exposed_records_link(layout: RunLayout, site_id: int) -> str | None:
    """The site's exposed-records file relative to its report, when the file exists."""
    return _site_local_link(layout, exposed_records_name(site_id))


def _site_local_link(layout: RunLayout, name: str) -> str | None:
    """A file of the site's state directory relative to its report, when it exists."""
    path = layout.site_state / name
    if not path.exists():
        return None
    return Path(os.path.relpath(path, layout.site_reports)).as_posix()


def build_site_page_report(
    layout: RunLayout,
    site: SiteReport,
    result: PanoramiaResult | None,
    *,
    config: ReportConfig,
    standing: ConsortiumStanding,
    source: Literal["consortium", "site"],
) -> SitePageReport:
    """A site's report from its numbers, its standing and the run directory's files."""
    link = exposed_records_link(layout, site.site_id)
    secure = config.privacy.secure_aggregation
    policy = config.policy
    return SitePageReport(
        schema_version=SCHEMA_VERSION,
        run_name=config.name,
        site=site,
        reading=plain_reading(site, exposed_records=link is not None),
        threat_model=[*(NOTES[n] for n in THREAT_MODEL), *inversion_threat(site, secure)],
        standing=standing,
        manifest=build_manifest(config, result, platform_of(layout)),
        exposed_records_link=link,
        source=source,
        between_runs=_between_runs(layout, site.site_id),
        inversion_gallery_link=_site_local_link(layout, inversion_gallery_name(site.site_id)),
        rebuilt_gallery_link=_site_local_link(layout, rebuilt_gallery_name(site.site_id)),
        secure_aggregation=secure,
        gate=None if policy is None else verdict_of(policy, site_gate_lines(policy, site)),
        model_checks=flagged_models(layout, site.site_id),
    )


def flagged_models(layout: RunLayout, site_id: int) -> list[CheckRecord]:
    """The received models the site's checks flagged: its own log of its checks where the
    site's files are here (simulation, or the site's own rebuild), else the models it
    refused as the server's round lines say (``metrics.jsonl``)."""
    own = layout.site_state / model_checks_name(site_id)
    if own.exists():
        return [r for r in read_check_records(own) if r.flagged]
    if not layout.metrics.exists():
        return []
    return [
        CheckRecord(site_id=site_id, server_round=r.round, outcomes=flag.flagged, refused=True)
        for r in read_rounds(layout)
        if (flag := r.flagged.get(str(site_id))) is not None
    ]


def platform_of(layout: RunLayout) -> PlatformInfo | None:
    """The run's ``platform.json``; None without one (or unreadable: the page still goes)."""
    try:
        return read_record(PlatformInfo, layout.platform)
    except RunFileError:
        return None


def _between_runs(layout: RunLayout, site_id: int) -> ReplicateSite | None:
    """The site's numbers over the replicate set of the run, when it belongs to one."""
    replicates = load_replicates(layout)
    sites = [] if replicates is None else replicates.sites
    return next((s for s in sites if s.site_id == site_id), None)


def write_site_reports(inputs: RunInputs, report: RunReport) -> list[ReportFiles]:
    """The aggregator's per-site reports: one per site with an audit file (ok or failed)."""
    written = []
    for site in report.sites:
        audit = inputs.audits.get(site.site_id)
        if audit is None:
            continue
        result = audit.results.panoramia
        page = build_site_page_report(
            inputs.layout,
            site,
            result,
            config=inputs.config,
            standing=consortium_standing(site.site_id, report.sites),
            source="consortium",
        )
        written.append(_write(inputs.layout, page))
    return written


def write_site_report(layout: RunLayout, site_id: int, config: ReportConfig) -> ReportFiles:
    """Rebuild one site's report from ``audits/site-<id>.json`` alone
    (:func:`site_page_alone`)."""
    return _write(layout, site_page_alone(layout, site_id, config))


def site_page_alone(layout: RunLayout, site_id: int, config: ReportConfig) -> SitePageReport:
    """One site's report from ``audits/site-<id>.json`` alone (plus ``config``, as
    its caller read config.yaml when there, the server's client_dp.json, platform.json and
    the site's entry of the replicate set's replicates.json, when there); a
    :class:`RunFileError` when the audit file is missing or client_dp.json malformed."""
    audit = load_site_audit(layout, site_id)
    result = audit.results.panoramia
    site = site_report(
        site_id,
        audit,
        rounds=[],
        settings=config.privacy,
        client_dp=read_record(ClientDPFile, layout.client_dp_accounting),
    )
    return build_site_page_report(
        layout,
        site,
        result,
        config=config,
        standing=standing_unavailable(),
        source="site",
    )


def _write(layout: RunLayout, page: SitePageReport) -> ReportFiles:
    paths = site_report_paths(layout, page.site.site_id)
    paths.json_path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(paths.json_path, report_to_json_text(page))
    atomic_write_text(paths.html_path, render_site_page(page))
    return dataclasses.replace(paths, warnings=violation_warnings([page.site]))
