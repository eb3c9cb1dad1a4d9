"""The run's report files: report.json / .csv / .md / .html, ledger.csv and each audited
site's own report, written from the run directory's files."""

from __future__ import annotations

from pathlib import Path

from contracts.files import atomic_write_text

from .aggregate import build_report
from .formatting import violation_warnings
from .inputs import load_run
from .run_report import render_html, render_markdown
from .schema import ReportFiles, RunReport
from .site_report import write_site_reports
from .writers import ledger_csv_rows, report_to_json_text, site_rows, write_rows


def report_warnings(report: RunReport) -> list[str]:
    """One line per bound violation (a measured lower bound above the DP guarantee)."""
    return violation_warnings(report.sites)


def written_report_warnings(run_dir: Path) -> list[str]:
    """:func:`report_warnings` of a run whose report is written (none without one), read
    from the run's files as :func:`write_report` reads them."""
    if not (Path(run_dir) / "report.json").exists():
        return []
    return report_warnings(build_report(load_run(Path(run_dir))))


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
    return ReportFiles(
        json_path=atomic_write_text(run_dir / "report.json", report_to_json_text(report)),
        csv_path=write_rows(run_dir / "report.csv", site_rows(report.sites)),
        md_path=atomic_write_text(run_dir / "report.md", render_markdown(report)),
        html_path=atomic_write_text(run_dir / "report.html", render_html(report)),
        site_reports=write_site_reports(run_dir, inputs, report),
        ledger_csv_path=write_rows(run_dir / "ledger.csv", ledger_csv_rows(report)),
        warnings=report_warnings(report),
    )
