"""report.md writer: banners, the headline table, the consortium summary, what eps_tilde
means, the per-site table and the privacy ledger."""

from __future__ import annotations

from .columns import (
    BY_ROUND_COLUMNS,
    HEADLINE_COLUMNS,
    LEDGER_COLUMNS,
    SITE_COLUMNS,
    md_table,
    md_text,
)
from .formatting import (
    FLAG_LEGEND,
    HEADLINE_NOTE,
    LEDGER_INTRO,
    MEANING_POINTS,
    MISSING,
    VIOLATION_TITLE,
    canary_banner,
    client_canary_lines,
    consortium_lines,
    first_leaking_text,
    levels_lines,
    scoped_reasons,
    violation_banner_lines,
)
from .html_report import ledger_rows
from .schema import RunReport


def banner_lines(report: RunReport) -> list[str]:
    """The banners at the top: bound violations (loud), then canaries; each a blockquote."""
    lines: list[str] = []
    violations = [v for s in report.sites for v in s.checks.bound_violations]
    if violations:
        lines += [f"> **{VIOLATION_TITLE}: a measured lower bound is above the DP guarantee**", ">"]
        lines += [f"> - {md_text(x)}" for x in violation_banner_lines(violations)]
        lines.append("")
    if report.canaries:
        lines += [f"> **Canaries.** {md_text(canary_banner(report.canaries))}", ""]
    return lines


def render_markdown(report: RunReport) -> str:
    """The Markdown text of ``report.md``."""
    lines = [
        "# PANORAMIA consortium audit report",
        "",
        *banner_lines(report),
        *md_table(HEADLINE_COLUMNS, report.sites),
        "",
        HEADLINE_NOTE,
        "",
        "### Consortium summary",
        "",
        *[f"- {md_text(x)}" for x in consortium_lines(report.consortium)],
        "",
        f"Report schema version {report.schema_version}. Numbers are rounded for display; "
        "report.json and report.csv hold them in full.",
        "",
        "## What eps_tilde means (read before drawing conclusions)",
        "",
        *[f"- {md_text(p)}" for p in MEANING_POINTS],
        "",
        "## Per-site audit",
        "",
        *md_table(SITE_COLUMNS, report.sites),
        "",
        FLAG_LEGEND,
        HEADLINE_NOTE,
    ]
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
    if report.sites:
        lines += [
            "",
            "## Privacy ledger",
            "",
            f"{LEDGER_INTRO} DP level of the run: {report.dp_level or MISSING}.",
            "",
            *([f"DP {report.noise}.", ""] if report.noise else []),
            *md_table(LEDGER_COLUMNS, ledger_rows(report)),
            "",
        ]
    above = [s for s in report.sites if s.checks.eps_tilde_above_accountant]
    lines += [
        f"- site {s.site_id}: {md_text(s.checks.eps_tilde_above_accountant or '')}" for s in above
    ]
    if report.client_canaries is not None:
        lines += ["", "## Canary clients", ""]
        lines += [f"- {md_text(x)}" for x in client_canary_lines(report.client_canaries)]
    over_rounds = [s for s in report.sites if s.by_round]
    lines += ["", "## Leakage over rounds"] if over_rounds else []
    for s in over_rounds:
        lines += ["", f"### Site {s.site_id}", "", first_leaking_text(s.by_round), ""]
        lines += md_table(BY_ROUND_COLUMNS, s.by_round)
    lines += ["", f"> {md_text(report.meaning)}", ""]
    return "\n".join(lines)
