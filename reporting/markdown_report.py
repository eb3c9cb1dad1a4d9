"""report.md writer: banners, per-site table, privacy ledger, consortium summary and what
eps_tilde means."""

from __future__ import annotations

import html
from pathlib import Path

from .formatting import (
    LEDGER_HEADERS,
    MEANING_POINTS,
    MISSING,
    SIDE_LABELS,
    VIOLATION_TITLE,
    canary_banner,
    consortium_lines,
    fmt,
    fmt_loss_gap,
    fmt_side_c_lb,
    fmt_two_sided,
    fmt_with_interval,
    ledger_cells,
    levels_lines,
    scoped_flag_labels,
    scoped_reasons,
    scorer_cells,
    scorer_headers,
    violation_banner_lines,
)
from .schema import SIDES, RunReport, SiteReport

_HEADER = (
    "site",
    "n_members",
    "c_lb",
    "ceiling",
    "{c+eps}_lb",
    "eps_tilde [95% CI]",
    "eps_tilde two-sided [95% CI] (side)",
    *(f"{SIDE_LABELS[side]} side c_lb / ceiling" for side in SIDES),
    "RM;RN",
    "RM;RN two-sided",
    "O(1)",
    *scorer_headers(),
    "f loss members / holdout",
    "DP eps (record-level guarantee)",
    "flags",
    "status",
)


def _cell(text: str) -> str:
    """Table-safe text: no newlines, escaped pipes, no raw HTML (renderers would run it)."""
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|")


def _flags_cell(site: SiteReport) -> str:
    scoped = scoped_flag_labels(site)
    if not scoped:
        return MISSING
    return "; ".join(
        f"{scope}: " + ", ".join(f"**{label}**" for label in labels) for scope, labels in scoped
    )


def _site_row(site: SiteReport) -> list[str]:
    return [
        str(site.site_id),
        fmt(site.n_members),
        fmt_with_interval(site.c_lb, site.c_lb_interval),
        fmt(site.ceiling),
        fmt_with_interval(site.c_eps_lb, site.c_eps_lb_interval),
        fmt_with_interval(site.eps_tilde, site.eps_tilde_interval),
        fmt_two_sided(site),
        *(fmt_side_c_lb(site, side) for side in SIDES),
        fmt_with_interval(site.rm_rn_eps_lb, site.rm_rn_eps_lb_interval),
        fmt_with_interval(site.rm_rn_eps_lb_two_sided, site.rm_rn_eps_lb_two_sided_interval),
        fmt_with_interval(site.o1_eps_lb, site.o1_eps_lb_interval),
        *scorer_cells(site),
        fmt_loss_gap(site),
        fmt(site.dp_epsilon, 2) if site.dp_epsilon is not None else "off",
        _flags_cell(site),
        site.status,
    ]


def banner_lines(report: RunReport) -> list[str]:
    """The banners at the top: bound violations (loud), then canaries; each a blockquote."""
    lines: list[str] = []
    violations = [v for s in report.sites for v in s.bound_violations]
    if violations:
        lines += [f"> **{VIOLATION_TITLE}: a measured lower bound is above the DP guarantee**", ">"]
        lines += [f"> - {_cell(x)}" for x in violation_banner_lines(violations)]
        lines.append("")
    if report.canaries:
        lines += [f"> **Canaries.** {_cell(canary_banner(report.canaries))}", ""]
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
        "| " + " | ".join(_cell(h) for h in LEDGER_HEADERS) + " |",
        "|" + "|".join("---" for _ in LEDGER_HEADERS) + "|",
        *["| " + " | ".join(_cell(x) for x in ledger_cells(r)) + " |" for r in report.ledger],
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
        *[f"- {_cell(p)}" for p in MEANING_POINTS],
        "",
        "## Per-site audit",
        "",
        "| " + " | ".join(_cell(h) for h in _HEADER) + " |",
        "|" + "|".join("---" for _ in _HEADER) + "|",
    ]
    lines += ["| " + " | ".join(_cell(x) for x in _site_row(s)) + " |" for s in report.sites]
    lines.append("")
    lines.append(
        "eps_tilde is a lower bound on epsilon only where c_lb is tight; sites flagged "
        "**saturated** read headroom (ceiling - c_lb), not leakage; sites flagged "
        "**c_lb not tight** may overstate it. Flags are per game: the one-sided game and each "
        "side of the two-sided one."
    )
    levels = levels_lines(report.sites)
    if levels:
        lines += ["", *[f"- {_cell(x)}" for x in levels]]
    reasons = [(s.site_id, *sr) for s in report.sites for sr in scoped_reasons(s)]
    if reasons:
        lines += ["", "Flag reasons:", ""]
        lines += [f"- site {sid} ({scope}): {_cell(r)}" for sid, scope, r in reasons]
    problems = [s for s in report.sites if s.status != "ok"]
    if problems:
        lines += ["", "### Sites without an audit", ""]
        for s in problems:
            why = s.error if s.status == "failed" else "no audit file in audits/"
            lines.append(f"- site {s.site_id} ({s.status}): {_cell(why or MISSING)}")
    lines += ["", *ledger_lines(report)]
    above = [s for s in report.sites if s.eps_tilde_above_accountant_reason]
    if above:
        lines += [
            *[f"- site {s.site_id}: {_cell(s.eps_tilde_above_accountant_reason)}" for s in above],
            "",
        ]
    lines += [
        "## Consortium summary",
        "",
        *[f"- {_cell(x)}" for x in consortium_lines(c)],
        "",
        f"> {_cell(c.meaning)}",
        "",
    ]
    return "\n".join(lines)


def write_markdown(report: RunReport, path: Path) -> Path:
    """Write ``report.md``."""
    path.write_text(render_markdown(report))
    return path
