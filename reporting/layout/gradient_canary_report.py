"""The white-box audit of a site's DP-SGD (``audit.gradient_canaries``) on the site's own
page, in one place: what its canaries cost, and the section of its conformance checks with
their rows (its part of the reports, :data:`~.report_parts.REPORT_PARTS`). Its numbers are
entries of :mod:`..numbers.metrics`, which the consortium's and the sweeps' tables name too;
what it means is in :mod:`..numbers.meanings`."""

from __future__ import annotations

from panoramia_fl.audit.canaries.gradient_canaries import GradientCanaryResult
from panoramia_fl.audit.conformance.checks import CHECKS, ConformanceCheck

from ..numbers.formatting import fmt
from ..numbers.metrics import (
    MECHANISM_ESTIMATE,
    MECHANISM_FDP,
    MECHANISM_STEINKE,
    SERVER_FDP,
    SERVER_STEINKE,
)
from ..numbers.report_parts import REPORT_PARTS, ReportPart
from ..schemas.schema import SiteReport
from .blocks import Block, Heading, Para, Table
from .columns import Column, column


def fmt_white_box_cost(result: GradientCanaryResult | None) -> str:
    """How many canaries watched how many steps, and what they cost."""
    if result is None:
        return "off"
    return (
        f"{result.n_canaries:,} canaries ({result.n_inserted:,} inserted) over "
        f"{result.steps:,} noisy steps in {result.rounds} rounds; +{result.overhead_s:.1f} s "
        "of training, no accuracy cost (they never touch the model)"
    )


CONFORMANCE_COLUMNS: tuple[Column[ConformanceCheck], ...] = (
    column("check", lambda c: c.name.replace("_", " "), cls="text"),
    column("compares", lambda c: CHECKS[c.name], cls="text"),
    column("result", lambda c: "passed" if c.passed else "FAILED", cls="text"),
    column("measured", lambda c: c.message, cls="text"),
    column(
        "p-value / level",
        lambda c: "deterministic" if c.level is None else f"{fmt(c.p_value, 4)} / {c.level:.4f}",
    ),
)
"""One row per conformance check of a site's real DP-SGD steps (its own page)."""


def conformance_section(site: SiteReport) -> list[Block]:
    """Does the site's DP-SGD do what its accountant assumes (audit.gradient_canaries)?"""
    canaries = site.results.gradient_canaries
    result = None if canaries is None else canaries.conformance
    if result is None:
        return []
    return [
        Heading("Does your DP-SGD do what its accountant assumes?"),
        Para(
            f"Your site watched its {result.steps:,} real DP-SGD steps over {result.rounds} "
            "rounds (the records each batch of its loader drew, the real clipping call, the "
            "gradient its optimizer consumed after the real noise, the accountant's record) and "
            "checked them against the accountant's recorded noise multiplier and sampling rate "
            "and the configured clipping norm. A failed check is a violation: the guarantee "
            "does not hold as stated. The statistical checks share "
            f"beta = {result.beta:g}; the others are exact. What is and is not verified: "
            "docs/white_box_audit.md."
        ),
        Table(CONFORMANCE_COLUMNS, list(result.checks), attrs=' id="conformance"'),
    ]


REPORT_PARTS.register("gradient_canaries")(
    ReportPart(
        metrics=(MECHANISM_FDP, MECHANISM_STEINKE, MECHANISM_ESTIMATE, SERVER_FDP, SERVER_STEINKE),
        site_section=lambda page: conformance_section(page.site),
    )
)
