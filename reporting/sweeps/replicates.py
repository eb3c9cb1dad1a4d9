"""A replicate set's report: one config trained and audited once per seed on the same data.

``replicates.json`` / ``.md`` / ``.html`` in the set's folder give, per site and headline
number (:func:`~.between_runs.pooled`), each run's value, the mean, the between-run 95%
interval and the mean's 95% interval. Each run's own report then quotes where another
training run would read.
"""

from __future__ import annotations

import os
from pathlib import Path

from panoramia_fl.contracts.errors import RunFileError
from panoramia_fl.contracts.files import atomic_write_text
from panoramia_fl.contracts.run_files import (
    REPLICATES_FILE,
    REPLICATES_HTML,
    REPLICATES_MD,
    RunLayout,
)
from panoramia_fl.contracts.run_log import PlatformInfo, read_record

from ..assembly.aggregate import build_report
from ..assembly.inputs import load_run
from ..assembly.run_config import ConfigReader
from ..assembly.writers import report_to_json_text
from ..layout.between_runs import Pooled, over_runs, pooled
from ..layout.blocks import Block, Heading, Para, Table, to_html, to_markdown
from ..layout.columns import SiteRow
from ..layout.sweep_columns import REPLICATE_RUN_COLUMNS, replicate_columns
from ..numbers.meanings import NOTES, Note
from ..pages.html_page import page
from ..schemas.replicate_schema import ReplicateReport, ReplicateRun, ReplicateSite
from ..schemas.schema import SCHEMA_VERSION, ReportFiles, RunReport, report_json
from .sweep_report import run_problems


def build_replicate_report(
    set_dir: Path,
    runs: list[tuple[int, RunLayout]],
    read_config: ConfigReader,
    *,
    name: str | None,
    partition_seed: int | None,
) -> ReplicateReport:
    """Pool the runs ``(seed, run directory)`` of a set, each with its config as
    ``read_config`` reads it; an unreadable run counts as incomplete, with no values."""
    reports: list[RunReport | None] = []
    entries = []
    for seed, layout in runs:
        try:
            inputs = load_run(layout, read_config(layout))
        except RunFileError as err:
            reports.append(None)
            entries.append(_run(set_dir, seed, layout, [str(err)]))
            continue
        report = build_report(inputs)
        reports.append(report)
        entries.append(
            _run(set_dir, seed, layout, run_problems(report, has_metrics=inputs.has_metrics))
        )
    site_ids = sorted({s.site_id for r in reports if r is not None for s in r.sites})
    return ReplicateReport(
        schema_version=SCHEMA_VERSION,
        name=name,
        partition_seed=partition_seed,
        runs=entries,
        sites=[_site(site_id, reports) for site_id in site_ids],
    )


def _run(set_dir: Path, seed: int, layout: RunLayout, problems: list[str]) -> ReplicateRun:
    try:
        info = read_record(PlatformInfo, layout.platform)
    except RunFileError:
        info = None
    return ReplicateRun(
        seed=seed,
        run_dir=os.path.relpath(layout.root, set_dir),
        status="incomplete" if problems else "complete",
        problems=problems,
        cpu=None if info is None else info.cpu_model,
    )


def _site(site_id: int, reports: list[RunReport | None]) -> ReplicateSite:
    """The site's numbers over the runs (a number no run has is left out)."""

    def values(metric: Pooled) -> list[float | None]:
        out: list[float | None] = []
        for report in reports:
            site = next((s for s in report.sites if s.site_id == site_id), None) if report else None
            row = (
                None
                if site is None or report is None
                else SiteRow(site, report.consortium.final_global_accuracy)
            )
            out.append(None if row is None else metric.get(row))
        return out

    numbers = {m.key: over_runs(values(m), m.bounds) for m in pooled()}
    return ReplicateSite(site_id, {k: v for k, v in numbers.items() if v.n > 0})


def replicate_blocks(report: ReplicateReport) -> list[Block]:
    """The set's page: its runs, then a table per site (one row per number)."""
    seeds = [r.seed for r in report.runs]
    blocks: list[Block] = [
        Heading(replicate_title(report), 1),
        Para(
            f"{len(seeds)} training runs of one config, seeds {', '.join(map(str, seeds))}, "
            f"on the same partition (partition seed {report.partition_seed}): training, DP "
            "noise and audit randomness vary between them, the sites' data does not."
        ),
        Para(NOTES[Note.BETWEEN_RUNS]),
        Heading("Runs"),
        Table(REPLICATE_RUN_COLUMNS, report.runs, row_class=lambda r: r.status),
    ]
    labels = {m.key: m.label for m in pooled()}
    for site in report.sites:
        rows = [(labels[m.key], site.numbers[m.key]) for m in pooled() if m.key in site.numbers]
        blocks += [Heading(f"Site {site.site_id}"), Table(replicate_columns(seeds), rows)]
    return blocks


def write_replicate_report(
    set_dir: Path,
    runs: list[tuple[int, RunLayout]],
    read_config: ConfigReader,
    *,
    name: str | None,
    partition_seed: int | None,
) -> ReportFiles:
    """Write ``replicates.json`` / ``.md`` / ``.html`` into ``set_dir``, then each run's own
    report again, so that its pages quote the set."""
    from .. import write_report  # the package's __init__ imports this module

    set_dir = Path(set_dir)
    set_dir.mkdir(parents=True, exist_ok=True)
    report = build_replicate_report(
        set_dir, runs, read_config, name=name, partition_seed=partition_seed
    )
    blocks = replicate_blocks(report)
    files = ReportFiles(
        json_path=atomic_write_text(set_dir / REPLICATES_FILE, report_to_json_text(report)),
        md_path=atomic_write_text(set_dir / REPLICATES_MD, to_markdown(blocks)),
        html_path=atomic_write_text(
            set_dir / REPLICATES_HTML,
            page(replicate_title(report), to_html(blocks), data=report_json(report)),
        ),
    )
    for _, layout in runs:
        try:
            write_report(layout, read_config(layout))
        except RunFileError:
            continue  # listed as incomplete in the set's report, with the reason
    return files


def replicate_title(report: ReplicateReport) -> str:
    return "Replicate runs" + (f" - {report.name}" if report.name else "")
