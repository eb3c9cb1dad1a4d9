"""Consortium report writer: report.json / .csv / .md / .html for a run, and sweep reports.

Public API::

    write_report(run_dir) -> ReportFiles      # .warnings: bound violations, for stderr
    write_site_report(run_dir, site_id) -> ReportFiles
    write_sweep_report(sweep_dir, points, *, write_point_reports=False) -> ReportFiles
    SweepPoint(label, overrides, run_dir)
"""

from __future__ import annotations

import json
from pathlib import Path

from .aggregate import build_report
from .formatting import VIOLATION_TITLE
from .html_report import write_html
from .inputs import ReportInputError, RunInputs, load_run
from .markdown_report import write_markdown
from .schema import SCHEMA_VERSION, ReportFiles, RunReport, SitePageReport
from .site_report import SITE_REPORTS_DIR, write_site_report, write_site_reports
from .sweep_report import SweepPoint, build_sweep_report, write_sweep_report
from .writers import write_csv, write_json, write_ledger_csv

__all__ = [
    "SCHEMA_VERSION",
    "SITE_REPORTS_DIR",
    "ReportFiles",
    "ReportInputError",
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
    return [
        f"{VIOLATION_TITLE}: {v.message}" for s in report.sites for v in s.checks.bound_violations
    ]


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
        f"{VIOLATION_TITLE}: {v['message']}"
        for site in sites
        for v in ((site.get("checks") or {}).get("bound_violations") or [])
        if isinstance(v, dict) and "message" in v
    ]


def write_report(run_dir: Path) -> ReportFiles:
    """Write report.json, .csv, .md, .html, ledger.csv and each site's own report into a run
    directory.

    Parameters
    ----------
    run_dir
        A run directory (config.yaml, partition.json, metrics.jsonl, audits/site-<id>.json).
        Sites in partition.json without an audit file are reported as "missing"; failed
        audits keep their error text; per-record scores in audits/ are never copied.

    Returns
    -------
    ReportFiles
        The paths written (``ledger.csv`` in ``ledger_csv_path``), each audited site's
        ``site-reports/site-<id>.json`` / ``.html`` in ``site_reports``, and in ``warnings``
        a line per bound violation, which the command line prints on stderr.

    Raises
    ------
    ReportInputError
        When config.yaml or partition.json is missing or malformed, or metrics.jsonl has a
        bad line (the message names the file and line or key).
    """
    run_dir = Path(run_dir)
    inputs = load_run(run_dir)
    report = build_report(inputs)
    results = {
        sid: a.result
        for sid, a in inputs.audits.items()
        if a.status == "ok" and a.result is not None
    }
    return ReportFiles(
        json_path=write_json(report, run_dir / "report.json"),
        csv_path=write_csv(report, run_dir / "report.csv"),
        md_path=write_markdown(report, run_dir / "report.md"),
        html_path=write_html(report, results, run_dir / "report.html"),
        site_reports=write_site_reports(run_dir, inputs, report),
        ledger_csv_path=write_ledger_csv(report, run_dir / "ledger.csv"),
        warnings=report_warnings(report),
    )
