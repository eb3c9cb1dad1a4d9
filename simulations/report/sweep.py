"""Sweep comparison report: several runs (one per override set) side by side."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from audit.result import EPS_TILDE_MEANING, TWO_SIDED_MEANING

from . import plots
from .aggregate import build_report
from .html_page import SORT_SCRIPT, badge, esc, figure, flag_badges, meaning_block, page, td, th_row
from .inputs import ReportInputError, load_run
from .schema import (
    SWEEP_SCHEMA_VERSION,
    ReportFiles,
    RunReport,
    SiteReport,
    SweepPointReport,
    SweepReport,
    SweepSiteRow,
    to_jsonable,
)
from .text import MISSING, flag_labels, fmt, fmt_interval, fmt_two_sided


@dataclass(frozen=True)
class SweepPoint:
    """One point of a sweep.

    Parameters
    ----------
    label
        Short name shown in tables and plots, e.g. ``"eps=4"``.
    overrides
        Dotted config key -> value applied to the base config for this point.
    run_dir
        The point's run directory (it may be incomplete or absent).
    """

    label: str
    overrides: dict[str, Any] = field(default_factory=dict)
    run_dir: Path = Path(".")


def build_sweep_report(
    sweep_dir: Path, points: list[SweepPoint], *, write_point_reports: bool = False
) -> SweepReport:
    """Aggregate the sweep's points (pure unless ``write_point_reports``)."""
    labels = [p.label for p in points]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise ValueError(f"sweep point labels must be unique; repeated: {dupes}")
    return SweepReport(
        schema_version=SWEEP_SCHEMA_VERSION,
        points=[_point(Path(sweep_dir), p, write_point_reports) for p in points],
        meaning=EPS_TILDE_MEANING,
        two_sided_meaning=TWO_SIDED_MEANING,
    )


def _point(sweep_dir: Path, point: SweepPoint, write_point_reports: bool) -> SweepPointReport:
    run_dir = Path(point.run_dir)
    rel = (
        os.path.relpath(run_dir, sweep_dir)
        if run_dir.is_absolute() == sweep_dir.is_absolute()
        else str(run_dir)
    )
    try:
        inputs = load_run(run_dir)
    except ReportInputError as exc:
        return SweepPointReport(
            label=point.label,
            overrides=dict(point.overrides),
            run_dir=rel,
            status="incomplete",
            problems=[str(exc)],
            private=None,
            theoretical_eps=None,
            global_accuracy=None,
            global_loss=None,
            rounds_completed=0,
            max_eps_tilde=None,
            max_eps_tilde_two_sided=None,
            sites=[],
            report_html=None,
        )
    report = build_report(inputs)
    if write_point_reports:
        # Imported here: the package's __init__ imports this module.
        from . import write_report

        write_report(run_dir)
    problems = _problems(report, has_metrics=inputs.has_metrics)
    eps = [s.dp_epsilon for s in report.sites if s.dp_epsilon is not None]
    config_dp = _dp_enabled(report.run)
    html_path = run_dir / "report.html"
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
        sites=[_site_row(s) for s in report.sites],
        report_html=os.path.join(rel, "report.html") if html_path.exists() else None,
    )


def _site_row(site: SiteReport) -> SweepSiteRow:
    """The sweep's view of a site: its SiteReport fields of the same name, and the DP eps."""
    copied = {
        f.name: getattr(site, f.name)
        for f in dataclasses.fields(SweepSiteRow)
        if f.name != "theoretical_eps"
    }
    return SweepSiteRow(theoretical_eps=site.dp_epsilon, **copied)


def _problems(report: RunReport, *, has_metrics: bool) -> list[str]:
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


def _dp_enabled(config: dict[str, Any]) -> bool | None:
    """What the run config says about DP: ``dp: null/false`` off, ``dp.enabled`` wins."""
    if "dp" not in config:
        return None
    dp = config["dp"]
    if isinstance(dp, dict):
        return bool(dp.get("enabled", True))
    return bool(dp)


def _points_table(report: SweepReport) -> list[str]:
    rows = [
        '<table class="sortable">',
        th_row(
            (
                "point",
                "overrides",
                "status",
                "theoretical eps",
                "global accuracy",
                "max eps_tilde",
                "max eps_tilde two-sided",
                "rounds",
                "report",
            )
        ),
    ]
    for p in report.points:
        overrides = ", ".join(f"{k}={v!r}" for k, v in p.overrides.items()) or MISSING
        status = esc(p.status)
        if p.problems:
            status += "<br>" + "<br>".join(
                f'<span class="error">{esc(x)}</span>' for x in p.problems
            )
        link = f'<a href="{esc(p.report_html)}">report.html</a>' if p.report_html else MISSING
        cls = "incomplete" if p.status == "incomplete" else "ok"
        rows.append(
            f'<tr class="{cls}">'
            + td(p.label, cls="text")
            + td(overrides, cls="text")
            + td(status, raw=True, cls="text")
            + td(_eps_text(p.theoretical_eps, p.private), title=p.theoretical_eps)
            + td(fmt(p.global_accuracy), title=p.global_accuracy)
            + td(fmt(p.max_eps_tilde), title=p.max_eps_tilde)
            + td(fmt(p.max_eps_tilde_two_sided), title=p.max_eps_tilde_two_sided)
            + td(str(p.rounds_completed))
            + td(link, raw=True, cls="text")
            + "</tr>"
        )
    rows.append("</table>")
    return rows


def _eps_text(eps: float | None, private: bool | None) -> str:
    if eps is not None:
        return fmt(eps, 2)
    if private is True:
        return "unknown (DP on)"
    return "inf (no DP)" if private is False else MISSING


def _sites_table(report: SweepReport) -> list[str]:
    rows = [
        '<table class="sortable">',
        th_row(
            (
                "point",
                "site",
                "status",
                "theoretical eps",
                "eps_tilde",
                "eps_tilde 95% CI",
                "eps_tilde two-sided [95% CI] (side)",
                "c_lb",
                "ceiling",
                "RM;RN",
                "RM;RN two-sided",
                "O(1)",
                "flags",
            )
        ),
    ]
    for p in report.points:
        for s in p.sites:
            labels = flag_labels(s.flags)
            badges = flag_badges(labels)
            if s.status != "ok":
                badges += badge(s.status, s.status)
                if s.error:
                    badges += f' <span class="error">{esc(s.error)}</span>'
            cls = (
                s.status
                if s.status != "ok"
                else (
                    "not-tight" if "c_lb not tight" in labels else "saturated" if labels else "ok"
                )
            )
            rows.append(
                f'<tr class="{esc(cls)}">'
                + td(p.label, cls="text")
                + td(str(s.site_id))
                + td(s.status, cls="text")
                + td(_eps_text(s.theoretical_eps, p.private), title=s.theoretical_eps)
                + td(fmt(s.eps_tilde), title=s.eps_tilde)
                + td(fmt_interval(s.eps_tilde_interval))
                + td(fmt_two_sided(s), title=s.eps_tilde_two_sided)
                + td(fmt(s.c_lb), title=s.c_lb)
                + td(fmt(s.ceiling), title=s.ceiling)
                + td(fmt(s.rm_rn_eps_lb), title=s.rm_rn_eps_lb)
                + td(fmt(s.rm_rn_eps_lb_two_sided), title=s.rm_rn_eps_lb_two_sided)
                + td(fmt(s.o1_eps_lb), title=s.o1_eps_lb)
                + td(badges or MISSING, raw=True, cls="text")
                + "</tr>"
            )
    rows.append("</table>")
    return rows


def render_sweep_html(report: SweepReport) -> str:
    """The HTML text of ``sweep.html``."""
    body = [
        "<h1>PANORAMIA sweep comparison</h1>",
        f"<p>Sweep schema version {esc(report.schema_version)}; {len(report.points)} points. "
        "Incomplete points are listed with what is missing; their available numbers are "
        "still shown.</p>",
        meaning_block(),
        "<h2>Points</h2>",
        "<p>Click a column header to sort a table by it (again to reverse).</p>",
        *_points_table(report),
        "<h2>Per point and site</h2>",
        *_sites_table(report),
        "<h2>Measured epsilon against the theoretical epsilon</h2>",
        figure(
            plots.sweep_eps_plot(report.points),
            "One marker per site and point: eps_tilde one-sided and two-sided with their 95% "
            "intervals, RM;RN and O(1) lower bounds. Non-private points sit at the 'inf' "
            "position. Lower bounds should stay below the dotted y = eps line; eps_tilde is a "
            "lower bound only where c_lb is tight.",
            alt="measured vs theoretical epsilon",
        ),
        "<h2>Accuracy against privacy</h2>",
        figure(
            plots.sweep_accuracy_plot(report.points),
            "Final-round global accuracy of each point against its theoretical eps "
            "(max over sites); non-private points at 'inf'.",
            alt="accuracy vs privacy",
        ),
    ]
    return page("PANORAMIA sweep comparison", body, data=to_jsonable(report), script=SORT_SCRIPT)


def write_sweep_report(
    sweep_dir: Path, points: list[SweepPoint], *, write_point_reports: bool = False
) -> ReportFiles:
    """Write ``sweep.json`` and a self-contained ``sweep.html`` comparing the points.

    Parameters
    ----------
    sweep_dir
        Where to write (created if absent).
    points
        The sweep's points, in display order; labels must be unique.
    write_point_reports
        Also write each readable point's own report files into its run directory
        (``sweep.html`` links to them).

    Returns
    -------
    ReportFiles
        ``json_path`` and ``html_path`` (``csv_path`` / ``md_path`` are None).
    """
    sweep_dir = Path(sweep_dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    report = build_sweep_report(sweep_dir, points, write_point_reports=write_point_reports)
    json_path = sweep_dir / "sweep.json"
    json_path.write_text(
        json.dumps(to_jsonable(report), indent=2, allow_nan=False, default=str) + "\n"
    )
    html_path = sweep_dir / "sweep.html"
    html_path.write_text(render_sweep_html(report))
    return ReportFiles(json_path=json_path, html_path=html_path)
