"""A release policy's verdict as a report section (report.html / .md, a site's page, the
evidence pack): the verdict in a sentence, then its lines as a table."""

from __future__ import annotations

from ..layout.blocks import Block, Heading, Para, Table
from ..layout.columns import Column, column
from ..schemas.gate_schema import GateLine, GateVerdict

GATE_COLUMNS: tuple[Column[GateLine], ...] = (
    column("where", lambda line: line.where, cls="text"),
    column("rule", lambda line: line.rule, cls="text"),
    column(
        "outcome",
        lambda line: (
            line.outcome + (" (counts as a failure)" * (line.failed and line.outcome != "fail"))
        ),
        cls="text",
    ),
    column("read", lambda line: line.detail, cls="text"),
)
"""One row per line of a verdict."""

_ROW_CLASS = {"fail": "violation", "not measured": "missing"}


def verdict_sentence(verdict: GateVerdict) -> str:
    """The verdict in a sentence: passed or not, and the count of each outcome."""
    c = verdict.counts
    head = "passes" if verdict.passed else "does not pass"
    what = f" ({verdict.description.strip()})" if verdict.description.strip() else ""
    return (
        f"The release policy '{verdict.policy}'{what} {head}: {c['pass']} rule checks passed, "
        f"{c['fail']} failed and {c['not measured']} could not be measured; "
        f"{c['failing']} count against release."
    )


def gate_blocks(
    verdict: GateVerdict | None, *, level: int = 2, none: str | None = None
) -> list[Block]:
    """The verdict's section; without a verdict, ``none`` as its one line (None: no section)."""
    if verdict is None:
        return (
            []
            if none is None
            else [Heading("Verdict against the release policy", level), Para(none)]
        )
    return [
        Heading("Verdict against the release policy", level),
        Para(verdict_sentence(verdict)),
        Table(
            GATE_COLUMNS,
            verdict.lines,
            attrs=' id="gate"',
            row_class=lambda line: _ROW_CLASS.get(line.outcome),
        ),
    ]
