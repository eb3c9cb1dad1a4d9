"""Consortium report writer: report.json / .csv / .md / .html for a run, each site's own
report, and sweep reports."""

from __future__ import annotations

import json
from pathlib import Path

from contracts.files import atomic_write_text

from .aggregate import build_report
from .formatting import violation_warning, violation_warnings
from .inputs import RunInputs, load_run
from .run_report import render_html, render_markdown
from .schema import SCHEMA_VERSION, ReportFiles, RunReport, SitePageReport
from .site_report import SITE_REPORTS_DIR, write_site_report, write_site_reports
from .sweep_report import SweepPoint, build_sweep_report, write_sweep_report
from .writers import ledger_csv_rows, report_to_json_text, site_rows, write_rows

__all__ = [
    "SCHEMA_VERSION",
    "SITE_REPORTS_DIR",
    "ReportFiles",
    "RunInputs",
    "RunReport",
    "SitePageReport",
    "SweepPoint",
    "build_report",
    "build_sweep_report",
    "load_run",
    "report_warnings",
    "write_report",
    "write_site_report",
    "write_sweep_report",
    "written_report_warnings",
]


def report_warnings(report: RunReport) -> list[str]:
    """One line per bound violation (a measured lower bound above the DP guarantee)."""
    return violation_warnings(report.sites)


def written_report_warnings(run_dir: Path) -> list[str]:
    """:func:`report_warnings` of the report.json already in ``run_dir`` (none without one)."""
    path = Path(run_dir) / "report.json"
    if not path.exists():
        return []
    try:
        sites = json.loads(path.read_text()).get("sites") or []
    except (OSError, ValueError, AttributeError):
        return []
    return [
        violation_warning(v["message"])
        for site in sites
        for v in ((site.get("checks") or {}).get("bound_violations") or [])
        if isinstance(v, dict) and "message" in v
    ]


def write_report(run_dir: Path) -> ReportFiles:
    """Write report.json, .csv, .md, .html, ledger.csv and each audited site's own report
    into a run directory; ``warnings`` holds a line per bound violation (for stderr).

    Sites in partition.json without an audit file are "missing"; failed audits keep their
    error text; per-record scores in audits/ are never copied. Raises
    :class:`RunFileError` (naming the file, and line or key) for a missing or malformed
    config.yaml, partition.json, metrics.jsonl line or client_dp.json.
    """
    run_dir = Path(run_dir)
    inputs = load_run(run_dir)
    report = build_report(inputs)
    results = {sid: a.result for sid, a in inputs.audits.items() if a.result is not None}
    return ReportFiles(
        json_path=atomic_write_text(run_dir / "report.json", report_to_json_text(report)),
        csv_path=write_rows(run_dir / "report.csv", site_rows(report.sites)),
        md_path=atomic_write_text(run_dir / "report.md", render_markdown(report)),
        html_path=atomic_write_text(run_dir / "report.html", render_html(report, results)),
        site_reports=write_site_reports(run_dir, inputs, report),
        ledger_csv_path=write_rows(run_dir / "ledger.csv", ledger_csv_rows(report)),
        warnings=report_warnings(report),
    )
