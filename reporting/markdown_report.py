"""report.md writer: banners, per-site table, privacy ledger, consortium summary and what
eps_tilde means."""

from __future__ import annotations

import html
from collections.abc import Iterable
from pathlib import Path

from .columns import LEDGER_COLUMNS, SITE_COLUMNS, Column, Row, md_cells, md_headers
from .formatting import (
    MEANING_POINTS,
    MISSING,
    VIOLATION_TITLE,
    canary_banner,
    consortium_lines,
    levels_lines,
    scoped_reasons,
    violation_banner_lines,
)
from .schema import RunReport


def md_text(text: str) -> str:
    """Table-safe text: no newlines, escaped pipes, no raw HTML (renderers would run it)."""
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|")


def table_lines(columns: tuple[Column[Row], ...], rows: Iterable[Row]) -> list[str]:
    """A Markdown table of the columns' Markdown cells (:mod:`.columns`)."""
    headers = md_headers(columns)
    return [
        "| " + " | ".join(md_text(h) for h in headers) + " |",
        "|" + "|".join("---" for _ in headers) + "|",
        *["| " + " | ".join(md_text(x) for x in md_cells(columns, row)) + " |" for row in rows],
    ]


def banner_lines(report: RunReport) -> list[str]:
    """The banners at the top: bound violations (loud), then canaries; each a blockquote."""
    lines: list[str] = []
    violations = [v for s in report.sites for v in s.bound_violations]
    if violations:
        lines += [f"> **{VIOLATION_TITLE}: a measured lower bound is above the DP guarantee**", ">"]
        lines += [f"> - {md_text(x)}" for x in violation_banner_lines(violations)]
        lines.append("")
    if report.canaries:
        lines += [f"> **Canaries.** {md_text(canary_banner(report.canaries))}", ""]
    return lines


def ledger_lines(report: RunReport) -> list[str]:
    """The "Privacy ledger" section: one row per site."""
    if not report.ledger:
        return []
    return [
        "## Privacy ledger",
        "",
        "Each site's guarantees (accountant, delta) beside its measured lower bounds and "
        "eps_tilde. Every lower bound (canary, O(1), RM;RN) must be at most DP eps; eps_tilde "
        "is a measurement, not a bound.",
        "",
        *([f"DP {report.noise}.", ""] if report.noise else []),
        *table_lines(LEDGER_COLUMNS, report.ledger),
        "",
    ]


def render_markdown(report: RunReport) -> str:
    """The Markdown text of ``report.md``."""
    c = report.consortium
    lines = [
        "# PANORAMIA consortium audit report",
        "",
        *banner_lines(report),
        f"Report schema version {report.schema_version}. Numbers are rounded for display; "
        "report.json and report.csv hold them in full.",
        "",
        "## What eps_tilde means (read before the numbers)",
        "",
        *[f"- {md_text(p)}" for p in MEANING_POINTS],
        "",
        "## Per-site audit",
        "",
        *table_lines(SITE_COLUMNS, report.sites),
    ]
    lines.append("")
    lines.append(
        "eps_tilde is a lower bound on epsilon only where c_lb is tight; sites flagged "
        "**saturated** read headroom (ceiling - c_lb), not leakage; sites flagged "
        "**c_lb not tight** may overstate it. Flags are per game: the one-sided game and each "
        "side of the two-sided one."
    )
    levels = levels_lines(report.sites)
    if levels:
        lines += ["", *[f"- {md_text(x)}" for x in levels]]
    reasons = [(s.site_id, *sr) for s in report.sites for sr in scoped_reasons(s)]
    if reasons:
        lines += ["", "Flag reasons:", ""]
        lines += [f"- site {sid} ({scope}): {md_text(r)}" for sid, scope, r in reasons]
    problems = [s for s in report.sites if s.status != "ok"]
    if problems:
        lines += ["", "### Sites without an audit", ""]
        for s in problems:
            why = s.error if s.status == "failed" else "no audit file in audits/"
            lines.append(f"- site {s.site_id} ({s.status}): {md_text(why or MISSING)}")
    lines += ["", *ledger_lines(report)]
    above = [s for s in report.sites if s.eps_tilde_above_accountant_reason]
    if above:
        lines += [
            *[f"- site {s.site_id}: {md_text(s.eps_tilde_above_accountant_reason)}" for s in above],
            "",
        ]
    if report.client_canaries:
        summary = report.client_canaries["summary"]
        lines += ["## Canary clients", "", *[f"- {md_text(x)}" for x in summary], ""]
    lines += [
        "## Consortium summary",
        "",
        *[f"- {md_text(x)}" for x in consortium_lines(c)],
        "",
        f"> {md_text(c.meaning)}",
        "",
    ]
    return "\n".join(lines)


def write_markdown(report: RunReport, path: Path) -> Path:
    """Write ``report.md``."""
    path.write_text(render_markdown(report))
    return path
