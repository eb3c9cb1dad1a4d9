"""The run's report files: report.json / .csv / .md / .html, ledger.csv and each audited
site's own report, written from the run directory's files."""

from __future__ import annotations

from dataclasses import dataclass, field

from panoramia_fl.contracts.files import atomic_write_text
from panoramia_fl.contracts.run_files import RunLayout

from ..assembly.aggregate import build_report
from ..assembly.inputs import RunInputs, load_run
from ..assembly.run_config import ReportConfig
from ..assembly.writers import ledger_csv_rows, report_to_json_text, site_rows, write_rows
from ..layout.banners import chance_flags_warnings, violation_warnings
from ..schemas.lost_sites import NOT_STARTED, LostSites, lost_sites, stopped_before_training
from ..schemas.schema import ReportFiles, RunReport
from ..site.site_report import write_site_reports
from .run_report import named_sites, render_html, render_markdown


def report_warnings(inputs: RunInputs, report: RunReport) -> list[str]:
    """One line per input left out (``inputs.warnings``: an audit file of no listed site)
    and per bound violation (a measured lower bound above the DP guarantee), then the
    consortium's reading when those are all flags consistent with chance."""
    violations = violation_warnings(report.sites)
    stopped = [NOT_STARTED] if stopped_before_training(report) else []
    return [
        *stopped,
        *inputs.warnings,
        *violations,
        *chance_flags_warnings(named_sites(report), "run"),
    ]


@dataclass(frozen=True)
class RunReportFiles(ReportFiles):
    """The files of a run's report, and what the run lost (for stderr and the exit status)."""

    lost: LostSites = field(default_factory=LostSites)
    """The sites the run lost (:func:`~.lost_sites.lost_sites`), as the report opens with."""


def write_report(layout: RunLayout, config: ReportConfig) -> RunReportFiles:
    """Write report.json, .csv, .md, .html, ledger.csv and each audited site's own report
    into a run directory; ``config``: the run's, as its caller read it. ``warnings`` holds a
    line per input left out and per bound violation (for stderr), ``lost`` the sites the run
    lost.

    Sites in partition.json without an audit file are "missing"; failed audits keep their
    error text; per-record scores in audits/ are never copied. Raises
    :class:`RunFileError` (naming the file, and line or key) for a missing or malformed
    partition.json, metrics.jsonl line or client_dp.json.
    """
    inputs = load_run(layout, config)
    report = build_report(inputs)
    return RunReportFiles(
        json_path=atomic_write_text(layout.report_json, report_to_json_text(report)),
        csv_path=write_rows(layout.report_csv, site_rows(report.sites)),
        md_path=atomic_write_text(
            layout.report_md, render_markdown(report, config.name, audited=config.audited)
        ),
        html_path=atomic_write_text(
            layout.report_html, render_html(report, config.name, audited=config.audited)
        ),
        site_reports=write_site_reports(inputs, report),
        ledger_csv_path=write_rows(layout.ledger_csv, ledger_csv_rows(report)),
        warnings=report_warnings(inputs, report),
        lost=lost_sites(report, audited=config.audited),
    )
