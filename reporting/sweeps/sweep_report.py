"""Sweep comparison report: several runs (one per override set) side by side.

``sweep.json``, a self-contained ``sweep.html`` (tables and plots) and ``sweep.md`` (the
tables): per point and site the accountant epsilons (record / client level), accuracy and
the measured lower bounds, so a consortium sees the privacy/utility trade-off and how tight
each audit is.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from panoramia_fl.contracts.errors import RunFileError
from panoramia_fl.contracts.files import atomic_write_text
from panoramia_fl.contracts.run_files import REPORT_HTML, RunLayout

from ..assembly.aggregate import build_report
from ..assembly.inputs import load_run
from ..assembly.run_config import ConfigReader
from ..assembly.writers import report_to_json_text
from ..layout.banners import (
    chance_flags_warnings,
    consortium_banner,
    input_canary_banner,
    violation_warnings,
)
from ..layout.between_runs import (
    ACCURACY,
    HEADLINE,
    NO_COMPARISONS,
    compare_neighbours,
    comparison_line,
)
from ..layout.blocks import (
    Banner,
    Block,
    Bullets,
    Figure,
    Heading,
    Meaning,
    Para,
    Table,
    to_html,
    to_markdown,
)
from ..layout.columns import SiteRow, site_row_class
from ..layout.sweep_columns import (
    POINT_COLUMNS,
    SWEEP_SITE_COLUMNS,
    PointSite,
    sweep_replicate_columns,
)
from ..numbers.meanings import NOTES, Note
from ..pages.html_page import SORT_SCRIPT, page
from ..run.report_writer import write_report
from ..schemas.schema import SCHEMA_VERSION, ReportFiles, RunReport, SiteReport, report_json
from ..schemas.sweep_schema import SweepPointReport, SweepReport
from . import sweep_plots
from .observers import OBSERVER_COLUMNS, OBSERVERS_NOTE, observer_rows, observers_plot


@dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep: its label in tables and plots (``"eps=4"``), its dotted config
    overrides, and its run directory (it may be incomplete or absent; for a point run over
    seeds, the first run of its replicate set, whose report the point then pools)."""

    label: str
    overrides: dict[str, Any]
    layout: RunLayout


def build_sweep_report(
    sweep_dir: Path,
    points: list[SweepPoint],
    read_config: ConfigReader,
    *,
    write_point_reports: bool = False,
    unfinished: tuple[str, ...] = (),
) -> SweepReport:
    """Aggregate the sweep's finished points, each with its config as ``read_config`` reads
    it (pure unless ``write_point_reports``); ``unfinished``: the labels of those not
    finished yet."""
    labels = [p.label for p in points]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise ValueError(f"sweep point labels must be unique; repeated: {dupes}")
    reports = [_point(Path(sweep_dir), p, read_config, write_point_reports) for p in points]
    return SweepReport(
        schema_version=SCHEMA_VERSION,
        points=reports,
        meaning=NOTES[Note.EPS_TILDE],
        two_sided_meaning=NOTES[Note.TWO_SIDED],
        comparisons=compare_neighbours(reports),
        unfinished=list(unfinished),
    )


def _point(
    sweep_dir: Path, point: SweepPoint, read_config: ConfigReader, write_point_reports: bool
) -> SweepPointReport:
    layout = point.layout
    run_dir = layout.root
    rel = (
        os.path.relpath(run_dir, sweep_dir)
        if run_dir.is_absolute() == sweep_dir.is_absolute()
        else str(run_dir)
    )
    try:
        config = read_config(layout)
        inputs = load_run(layout, config)
    except RunFileError as exc:
        return SweepPointReport(point.label, dict(point.overrides), rel, "incomplete", [str(exc)])
    report = build_report(inputs)
    if write_point_reports:
        write_report(layout, config)
    problems = run_problems(report, has_metrics=inputs.has_metrics)
    eps = [s.privacy.dp_epsilon for s in report.sites if s.privacy.dp_epsilon is not None]
    # Any level counts: client-level DP alone makes the point private too.
    config_dp = config.privacy.private
    html_path = layout.report_html
    return SweepPointReport(
        label=point.label,
        overrides=dict(point.overrides),
        run_dir=rel,
        status="incomplete" if problems else "complete",
        problems=problems,
        private=bool(eps) or config_dp is True,
        theoretical_eps=max(eps) if eps else None,
        global_accuracy=report.consortium.final_global_accuracy,
        global_loss=report.consortium.final_global_loss,
        rounds_completed=report.consortium.rounds_completed,
        max_eps_tilde=report.consortium.max_eps_tilde,
        max_eps_tilde_two_sided=report.consortium.max_eps_tilde_two_sided,
        sites=report.sites,
        report_html=os.path.join(rel, REPORT_HTML) if html_path.exists() else None,
        dp_level=report.dp_level,
        canaries=report.canaries,
        replicates=report.replicates,
        secure_aggregation=report.secure_aggregation,
        client_dp=report.client_dp,
    )


def run_problems(report: RunReport, *, has_metrics: bool) -> list[str]:
    """What a run lacks for its report to be complete (empty: nothing)."""
    problems = []
    if not has_metrics:
        problems.append("metrics.jsonl is missing (training did not run or did not log)")
    elif not report.rounds:
        problems.append("metrics.jsonl has no rounds")
    if not report.sites:
        problems.append("partition.json lists no sites")
    for s in report.sites:
        if s.status == "failed":
            problems.append(f"site {s.site_id}: audit failed: {s.error}")
        elif s.status == "missing":
            problems.append(f"site {s.site_id}: no audit file")
    return problems


def _input_canary_lines(report: SweepReport) -> list[str]:
    """One banner per canary count (usually one for the whole sweep), naming its points."""
    by_count: dict[int, list[str]] = {}
    for p in report.points:
        if p.canaries:
            by_count.setdefault(p.canaries, []).append(p.label)
    lines = []
    for count, labels in by_count.items():
        which = "every point" if len(labels) == len(report.points) else ", ".join(labels)
        lines.append(f"{which}: {input_canary_banner(count)}")
    return lines


TITLE = "PANORAMIA sweep comparison"
SWEEP_JSON = "sweep.json"
"""The sweep report's numbers, in its folder; its points' labels, overrides and run
directories also let the report be written again (:func:`saved_sweep_points`)."""


def _named_sites(points: list[SweepPointReport]) -> list[tuple[str, SiteReport]]:
    """The sweep's sites as its banner and warnings name them."""
    return [(f"point {p.label}, site {s.site_id}", s) for p in points for s in p.sites]


def sweep_blocks(report: SweepReport) -> list[Block]:
    """The sweep, section by section: banners, the points, each point's sites, the plots."""
    points = report.points
    named = _named_sites(points)
    intro = f"Sweep schema version {report.schema_version}; {len(points)} points. "
    return [
        Heading(TITLE, 1),
        Banner(*consortium_banner(named, "sweep")),
        Banner("canaries", _input_canary_lines(report)),
        Para(
            intro + "Incomplete points are listed with what is missing; their available "
            "numbers are still shown.",
            only="html",
        ),
        Para(intro + "Plots are in sweep.html; sweep.json holds the numbers in full.", only="md"),
        *([Para(unfinished_line(report.unfinished))] if report.unfinished else []),
        Meaning(),
        Heading("Points"),
        Para("Click a column header to sort a table by it (again to reverse).", only="html"),
        Table(
            POINT_COLUMNS,
            points,
            attrs=' class="sortable"',
            row_class=lambda p: "incomplete" if p.status == "incomplete" else "ok",
        ),
        Heading("Per point and site"),
        Table(
            SWEEP_SITE_COLUMNS,
            [SiteRow(s, p.global_accuracy, p) for p in points for s in p.sites],
            attrs=' class="sortable"',
            row_class=lambda r: site_row_class(r.site),
        ),
        *_observers(points),
        *_over_seeds(report),
        *_plot_blocks(points),
        *_inversion(points),
    ]


def _plot_blocks(points: list[SweepPointReport]) -> list[Block]:
    """The sweep's figures (html only): measured against theoretical epsilon, accuracy
    against privacy, and per site accuracy and lower bounds against the accountant's."""
    return [
        Heading("Measured epsilon against the theoretical epsilon", only="html"),
        Figure(
            sweep_plots.sweep_eps_plot(points),
            "One marker per site and point: eps_tilde one-sided and two-sided with their 95% "
            "intervals, RM;RN and O(1) lower bounds. Non-private points sit at the 'inf' "
            "position. Lower bounds should stay below the dotted y = eps line; "
            f"{NOTES[Note.TIGHT_ONLY]}.",
            alt="measured vs theoretical epsilon",
        ),
        Heading("Accuracy against privacy", only="html"),
        Figure(
            sweep_plots.sweep_accuracy_plot(points),
            "Final-round global accuracy of each point against its theoretical eps "
            "(max over sites); non-private points at 'inf'.",
            alt="accuracy vs privacy",
        ),
        Heading("Per site: accuracy against the accountant's epsilon", only="html"),
        Figure(
            sweep_plots.sweep_site_accuracy_plot(points),
            "One panel per site: the final global accuracy (squares) and the model's accuracy "
            "on the site's held-out records (circles) at each point, against the site's "
            "record-level DP guarantee (log scale); points without DP at 'no DP', right.",
            alt="accuracy vs accountant epsilon per site",
        ),
        Heading("Per site: measured lower bounds against the accountant's epsilon", only="html"),
        Figure(
            sweep_plots.sweep_site_bounds_plot(points),
            "One panel per site: with gradient canaries, the white-box mechanism-level f-DP "
            "bound (blue square) and estimate with its interval (blue circle) and the "
            "server-level bound (cyan square); the canary audit's and O(1)'s lower bounds and "
            "eps_tilde (two-sided where measured); all against the site's record-level DP "
            "guarantee (log scale), with the y = x line; points without DP at 'no DP', right. "
            "A lower bound above the line is a bound violation; the gap below it is how far "
            f"the audit is from tight. {NOTES[Note.NOT_A_BOUND]}: above the line it is no "
            "contradiction.",
            alt="measured lower bounds vs accountant epsilon per site",
        ),
    ]


def _observers(points: list[SweepPointReport]) -> list[Block]:
    """What each party can measure, per point and site; with its figure (html)."""
    blocks: list[Block] = [
        Heading("What each party can measure"),
        Para(OBSERVERS_NOTE),
        Table(OBSERVER_COLUMNS, observer_rows(points), attrs=' class="sortable"'),
    ]
    svg = observers_plot(points)
    if svg is not None:
        blocks.append(
            Figure(
                svg,
                "Per observer, each site's reading at each point: the accountants' epsilons "
                "(record level; client level, site-wide; a record against the server), the "
                "server's inversion audit (mean quality above its public-record baseline; "
                "under secure aggregation attacked on the round's sum) and white-box "
                "server-level estimate, the largest two-sided eps_tilde of each site's "
                "updates over the audited rounds (filled) beside the same round's global "
                "model (hollow): what the server learns beside a model user; the model "
                "users' two-sided eps_tilde and O(1) of the final model. Bars: 95% intervals "
                "over audit repeats of one model. A missing marker is a reading the point "
                "does not allow or did not run (on the updates' panel: 'sum only' under "
                "secure aggregation, 'not run' without audit.updates).",
                alt="what each party can measure, per sweep point",
            )
        )
    return blocks


def _inversion(points: list[SweepPointReport]) -> list[Block]:
    """The inversion audit's quality against the accountant eps, when a point ran it."""
    svg = sweep_plots.sweep_site_inversion_plot(points)
    if svg is None:
        return []
    return [
        Heading("Per site: can the server rebuild the records?", only="html"),
        Figure(
            svg,
            "One panel per site, with audit.inversion: the mean quality of the records the "
            "server's gradient-inversion attack rebuilt from the site's update in its first "
            "attacked round (SSIM for images, 1 = identical; rows: the share of fields right; "
            "diamonds) and the same attack's on an update from public records (circles: what "
            "chance gives), against the site's record-level DP guarantee (log scale); points "
            "without record-level DP at 'no DP', right (docs/inversion.md).",
            alt="reconstruction quality vs accountant epsilon per site",
        ),
    ]


def _over_seeds(report: SweepReport) -> list[Block]:
    """The points run over several seeds: between-run intervals and the comparisons."""
    rows = [
        PointSite(p, s)
        for p in report.points
        if p.replicates is not None
        for s in p.replicates.sites
    ]
    if not rows:
        return []
    return [
        Heading("Over training seeds"),
        Para(
            "Each point below ran once per seed on the same partition; the tables above show "
            f"its first seed's run. {NOTES[Note.BETWEEN_RUNS]}"
        ),
        Table(sweep_replicate_columns(HEADLINE, ACCURACY), rows, attrs=' class="sortable"'),
        Figure(
            sweep_plots.sweep_replicates_plot(report.points),
            "Mean over each point's runs, with the between-run 95% interval as error bars.",
            alt="eps_tilde and accuracy over training seeds",
        ),
        Heading("Do neighbouring points differ beyond run-to-run spread?", 3),
        Para(NOTES[Note.COMPARISONS]),
        Bullets([comparison_line(c) for c in report.comparisons] or [NO_COMPARISONS]),
    ]


def render_sweep_html(report: SweepReport) -> str:
    """The HTML text of ``sweep.html``."""
    body = to_html(sweep_blocks(report))
    return page(TITLE, body, data=report_json(report), script=SORT_SCRIPT)


def render_sweep_markdown(report: SweepReport) -> str:
    """The Markdown text of ``sweep.md``: banners and the two tables (plots: sweep.html)."""
    return to_markdown(sweep_blocks(report))


def write_sweep_report(
    sweep_dir: Path,
    points: list[SweepPoint],
    read_config: ConfigReader,
    *,
    write_point_reports: bool = False,
    unfinished: tuple[str, ...] = (),
) -> ReportFiles:
    """Write ``sweep.json``, ``sweep.md`` and a self-contained ``sweep.html`` comparing the
    points (labels unique, in display order) into ``sweep_dir``; ``warnings``: a line per bound
    violation; ``read_config`` reads each point's config. ``write_point_reports``: also write
    each readable point's own report (linked)."""
    sweep_dir = Path(sweep_dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    report = build_sweep_report(
        sweep_dir,
        points,
        read_config,
        write_point_reports=write_point_reports,
        unfinished=unfinished,
    )
    warnings = [w for p in report.points for w in violation_warnings(p.sites, f"point {p.label}: ")]
    warnings += chance_flags_warnings(_named_sites(report.points), "sweep")
    return ReportFiles(
        json_path=atomic_write_text(sweep_dir / SWEEP_JSON, report_to_json_text(report)),
        html_path=atomic_write_text(sweep_dir / "sweep.html", render_sweep_html(report)),
        md_path=atomic_write_text(sweep_dir / "sweep.md", render_sweep_markdown(report)),
        warnings=warnings,
    )


def unfinished_line(labels: list[str]) -> str:
    """What a stopped sweep's report says of the points it did not finish."""
    return (
        f"Not finished: {', '.join(labels)}. The sweep stopped before "
        f"{'these points' if len(labels) > 1 else 'this point'} finished; only the points "
        "above are compared. Run the same sweep command again to continue it: finished "
        "points are kept, an unfinished one resumes from its last round."
    )


def write_sweep_progress(
    sweep_dir: Path, points: list[SweepPoint], read_config: ConfigReader, unfinished: list[str]
) -> Path:
    """``sweep.json`` of the points finished so far and the labels of the others (a sweep
    writes it after each point, so a stopped sweep can be reported, :func:`saved_sweep`)."""
    sweep_dir = Path(sweep_dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    report = build_sweep_report(sweep_dir, points, read_config, unfinished=tuple(unfinished))
    return atomic_write_text(sweep_dir / SWEEP_JSON, report_to_json_text(report))


def saved_sweep(sweep_dir: Path) -> tuple[list[SweepPoint], list[str]]:
    """The finished points :data:`SWEEP_JSON` lists (:func:`saved_sweep_points`) and the
    labels of those it did not finish."""
    points = saved_sweep_points(sweep_dir)
    saved = json.loads((Path(sweep_dir) / SWEEP_JSON).read_text())
    return points, [str(label) for label in saved.get("unfinished", [])]


def saved_sweep_points(sweep_dir: Path) -> list[SweepPoint]:
    """The points that ``sweep_dir``'s :data:`SWEEP_JSON` lists, in its order (label,
    overrides, run directory), so that its report can be written again from the points'
    saved runs without running anything (after an upgrade: ``panoramia-fl report
    SWEEP_DIR``). A :class:`RunFileError` names the file and what is wrong with it."""
    path = Path(sweep_dir) / SWEEP_JSON
    try:
        saved = json.loads(path.read_text())
        points = [
            SweepPoint(
                str(p["label"]), dict(p["overrides"]), RunLayout(Path(sweep_dir) / p["run_dir"])
            )
            for p in saved["points"]
        ]
    except OSError as exc:
        raise RunFileError(f"{path} cannot be read ({exc.strerror})") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise RunFileError(
            f"{path}: not a sweep report (each of its points needs a label, overrides and "
            f"run_dir): {exc!r}"
        ) from exc
    if not points:
        unfinished = saved.get("unfinished") if isinstance(saved, dict) else None
        if unfinished:
            raise RunFileError(
                f"{path}: the sweep stopped before any point finished (not finished: "
                f"{', '.join(map(str, unfinished))}); run the same sweep command again to "
                "continue it"
            )
        raise RunFileError(f"{path} lists no points")
    return points
