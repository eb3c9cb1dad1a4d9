"""Consortium report writer: report.json / .csv / .md / .html for a run, each site's own
report, and sweep reports."""

from __future__ import annotations

from .assembly.aggregate import build_report
from .assembly.inputs import RunInputs, load_run
from .run.report_writer import RunReportFiles, report_warnings, write_report
from .schemas.lost_sites import LostSites
from .schemas.schema import SCHEMA_VERSION, ReportFiles, RunReport, SitePageReport, report_json
from .site.site_report import write_site_report
from .sweeps.sweep_report import (
    SWEEP_JSON,
    SweepPoint,
    build_sweep_report,
    saved_sweep,
    saved_sweep_points,
    write_sweep_progress,
    write_sweep_report,
)

__all__ = [
    "SCHEMA_VERSION",
    "SWEEP_JSON",
    "LostSites",
    "ReportFiles",
    "RunInputs",
    "RunReport",
    "RunReportFiles",
    "SitePageReport",
    "SweepPoint",
    "build_report",
    "build_sweep_report",
    "load_run",
    "report_json",
    "report_warnings",
    "saved_sweep",
    "saved_sweep_points",
    "write_report",
    "write_site_report",
    "write_sweep_progress",
    "write_sweep_report",
]
