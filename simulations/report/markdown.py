"""report.md writer: per-site table, consortium summary and what eps_tilde means."""

from __future__ import annotations

import html
from pathlib import Path

from .schema import RunReport, SiteReport
from .text import MEANING_POINTS, MISSING, flag_labels, fmt, fmt_loss_gap, fmt_with_interval

_HEADER = (
    "site",
    "n_members",
    "c_lb",
    "ceiling",
    "{c+eps}_lb",
    "eps_tilde [95% CI]",
    "RM;RN",
    "O(1)",
    "f loss members / holdout",
    "DP eps",
    "flags",
    "status",
)


def _cell(text: str) -> str:
    """Table-safe text: no newlines, escaped pipes, no raw HTML (renderers would run it)."""
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|")


def _site_row(site: SiteReport) -> list[str]:
    flags = flag_labels(site.flags)
    return [
        str(site.site_id),
        fmt(site.n_members),
        fmt_with_interval(site.c_lb, site.c_lb_interval),
        fmt(site.ceiling),
        fmt_with_interval(site.c_eps_lb, site.c_eps_lb_interval),
        fmt_with_interval(site.eps_tilde, site.eps_tilde_interval),
        fmt_with_interval(site.rm_rn_eps_lb, site.rm_rn_eps_lb_interval),
        fmt_with_interval(site.o1_eps_lb, site.o1_eps_lb_interval),
        fmt_loss_gap(site),
        fmt(site.dp_epsilon, 2) if site.dp_epsilon is not None else "off",
        ", ".join(f"**{f}**" for f in flags) if flags else MISSING,
        site.status,
    ]


def render_markdown(report: RunReport) -> str:
    """The Markdown text of ``report.md``."""
    c = report.consortium
    lines = [
        "# PANORAMIA consortium audit report",
        "",
        f"Report schema version {report.schema_version}. Numbers are rounded for display; "
        "report.json and report.csv hold them in full.",
        "",
        "## What eps_tilde means (read before the numbers)",
        "",
        *[f"- {_cell(p)}" for p in MEANING_POINTS],
        "",
        "## Per-site audit",
        "",
        "| " + " | ".join(_HEADER) + " |",
        "|" + "|".join("---" for _ in _HEADER) + "|",
    ]
    lines += ["| " + " | ".join(_cell(x) for x in _site_row(s)) + " |" for s in report.sites]
    lines.append("")
    lines.append(
        "eps_tilde is a lower bound on epsilon only where c_lb is tight; sites flagged "
        "**saturated** read headroom (ceiling - c_lb), not leakage; sites flagged "
        "**c_lb not tight** overstate it."
    )
    reasons = [(s.site_id, r) for s in report.sites if s.flags for r in s.flags.reasons]
    if reasons:
        lines += ["", "Flag reasons:", ""]
        lines += [f"- site {sid}: {_cell(r)}" for sid, r in reasons]
    problems = [s for s in report.sites if s.status != "ok"]
    if problems:
        lines += ["", "### Sites without an audit", ""]
        for s in problems:
            why = s.error if s.status == "failed" else "no audit file in audits/"
            lines.append(f"- site {s.site_id} ({s.status}): {_cell(why or MISSING)}")
    lines += [
        "",
        "## Consortium summary",
        "",
        f"- sites: {c.n_sites} ({c.n_ok} ok, {c.n_failed} failed, {c.n_missing} missing)",
        f"- max eps_tilde over ok sites: {fmt(c.max_eps_tilde)} "
        f"(leakiest site: {MISSING if c.leakiest_site_id is None else c.leakiest_site_id})",
        f"- median eps_tilde over ok sites: {fmt(c.median_eps_tilde)}",
        f"- saturated sites: {_ids(c.saturated_sites)}; c_lb not tight: {_ids(c.not_tight_sites)}; "
        f"RM;RN capped: {_ids(c.rm_rn_capped_sites)}",
        f"- largest DP eps (accountant): "
        f"{fmt(c.max_dp_epsilon, 2) if c.max_dp_epsilon is not None else 'DP off'}",
        f"- rounds: {c.rounds_completed}; final global accuracy {fmt(c.final_global_accuracy)}, "
        f"loss {fmt(c.final_global_loss)}",
        "",
        f"> {_cell(c.meaning)}",
        "",
    ]
    return "\n".join(lines)


def _ids(ids: list[int]) -> str:
    return ", ".join(str(i) for i in ids) if ids else "none"


def write_markdown(report: RunReport, path: Path) -> Path:
    """Write ``report.md``."""
    path.write_text(render_markdown(report))
    return path
