"""Attribute inference (``audit.attribute_inference``) in the reports, in one place: its
numbers, its plain sentence, its columns in the consortium's table and on a site's own page,
and its section of each (its part of the reports, :data:`~.report_parts.REPORT_PARTS`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from panoramia_fl.audit.result import Interval
from panoramia_fl.audit.tabular.attribute_result import AttributeInferenceResult

from ..numbers.formatting import MISSING, fmt, fmt_est
from ..numbers.meanings import NOTES, Note
from ..numbers.metrics import Metric, Value
from ..numbers.report_parts import REPORT_PARTS, ReportPart
from ..schemas.schema import RunReport, SiteReport
from .blocks import Block, Heading, Para, Table
from .columns import _SITE, Column, _estimate, column


def _attribute(
    get: Callable[[AttributeInferenceResult], Value],
) -> Callable[[SiteReport], Value]:
    return lambda s: None if (a := s.results.attribute_inference) is None else get(a)


def _attribute_level(site: SiteReport) -> float | None:
    """Each side of the attribute-inference game holds at beta/2."""
    a = site.results.attribute_inference
    return None if a is None else a.beta / 2


ATTRIBUTE_EPS_LB = Metric(
    "attribute_eps_lb",
    "attribute inference eps_lb",
    _attribute(lambda a: a.eps_lb),
    name="attribute-inference eps lower bound (two-sided)",
    gloss="guessing membership by how much more the model-based guess of the sensitive field "
    "believes its true value than a baseline without the model, on members against real "
    "held-out records (c = 0): an eps lower bound",
    checked="released",
    level=_attribute_level,
)
ATTRIBUTE_ADVANTAGE = Metric(
    "attribute_advantage",
    "attribute inference advantage",
    _attribute(lambda a: a.advantage),
    name="attribute-inference advantage (accuracy on members minus on held-out records)",
    unit="fraction",
    gloss="how much more often the model-based guess names the sensitive field right for "
    "the model's members than for people it never saw (the baseline's gap beside it)",
)


def attribute_sentence(result: AttributeInferenceResult) -> str:
    """One plain sentence: does the model reveal the field better for the site's members?"""
    head = (
        f"Knowing the rest of a record and its label, an attacker who queries the model names "
        f"'{result.field}' right (one of {result.levels} values) for "
        f"{result.accuracy_members.mean:.0%} of your members and "
        f"{result.accuracy_nonmembers.mean:.0%} of your held-out records "
        f"(advantage {result.advantage.mean:+.1%}); a guess from public records without the "
        f"model: {result.baseline_accuracy_members.mean:.0%} and "
        f"{result.baseline_accuracy_nonmembers.mean:.0%}"
    )
    if result.eps_lb.mean > 0:
        reading = (
            f". The model singles out your members' true value: eps lower bound "
            f"{fmt_est(result.eps_lb)} at beta = {result.beta:g}."
        )
    else:
        reading = (
            ". The model does not single out your members' true value more than your held-out "
            "records' (eps lower bound 0)."
        )
    return head + reading


class GuessRow(NamedTuple):
    """A row of a site's attribute-inference table: one guess's accuracies."""

    guess: str
    members: Interval
    nonmembers: Interval
    advantage: Interval


def guess_rows(result: AttributeInferenceResult) -> list[GuessRow]:
    """The model-based guess, then the baseline without the model."""
    return [
        GuessRow(
            "with the model",
            result.accuracy_members,
            result.accuracy_nonmembers,
            result.advantage,
        ),
        GuessRow(
            "baseline (public records, no model)",
            result.baseline_accuracy_members,
            result.baseline_accuracy_nonmembers,
            result.baseline_advantage,
        ),
    ]


ATTRIBUTE_COLUMNS: tuple[Column[GuessRow], ...] = (
    column("guess of the sensitive field", lambda r: r.guess, cls="text"),
    _estimate("accuracy on members [95% CI]", lambda r: r.members),
    _estimate("on held-out records [95% CI]", lambda r: r.nonmembers),
    _estimate("advantage [95% CI]", lambda r: r.advantage),
)
"""A site's attribute-inference audit, one row per guess (its own page)."""


def _attribute_text(get: Callable[[Any], str]) -> Callable[[SiteReport], str]:
    return lambda s: MISSING if (a := s.results.attribute_inference) is None else get(a)


ATTRIBUTE_SITE_COLUMNS: tuple[Column[SiteReport], ...] = (
    _SITE,
    column("sensitive field", _attribute_text(lambda a: a.field), cls="text"),
    _estimate("eps lower bound [95% CI]", ATTRIBUTE_EPS_LB.get),
    _estimate("advantage [95% CI]", ATTRIBUTE_ADVANTAGE.get),
    _estimate(
        "baseline's advantage [95% CI]",
        lambda s: None if (a := s.results.attribute_inference) is None else a.baseline_advantage,
    ),
    column(
        "accuracy members / held-out (baseline)",
        _attribute_text(
            lambda a: (
                f"{fmt(a.accuracy_members.mean)} / {fmt(a.accuracy_nonmembers.mean)} "
                f"({fmt(a.baseline_accuracy_members.mean)} / "
                f"{fmt(a.baseline_accuracy_nonmembers.mean)})"
            )
        ),
    ),
)
"""The consortium's attribute-inference table, one row per site that ran it."""


def attribute_section(site: SiteReport) -> list[Block]:
    """Does the model reveal a sensitive field of the site's members (audit.attribute_inference)?"""
    result = site.results.attribute_inference
    if result is None:
        return []
    where = "public records" if result.reference == "public" else "a share of your held-out records"
    return [
        Heading(f"Does the model reveal your members' {result.field}?"),
        Para(attribute_sentence(result)),
        Para(f"How to read it: {NOTES[Note.ATTRIBUTE_INFERENCE]}"),
        Para(
            f"{result.pairs:,} pairs per game, {result.eps_lb.n} games; the guesses trained on "
            f"{result.n_reference:,} {where}; always guessing the most frequent value is right "
            f"for {result.majority_share:.0%}. The eps lower bound's sides: members "
            f"{fmt_est(result.eps_lb_member)}, held-out {fmt_est(result.eps_lb_nonmember)} "
            f"(ceiling {fmt(result.ceiling)}, each side at beta/2)."
        ),
        Table(ATTRIBUTE_COLUMNS, guess_rows(result), attrs=' id="attribute-inference"'),
    ]


def attribute_run_section(report: RunReport) -> list[Block]:
    """Each site's attribute-inference audit, when any site ran one."""
    sites = [s for s in report.sites if s.results.attribute_inference is not None]
    if not sites:
        return []
    return [
        Heading("Attribute inference"),
        Para(NOTES[Note.ATTRIBUTE_INFERENCE]),
        Table(ATTRIBUTE_SITE_COLUMNS, sites, attrs=' id="attribute-inference"'),
    ]


REPORT_PARTS.register("attribute_inference")(
    ReportPart(
        metrics=(ATTRIBUTE_EPS_LB, ATTRIBUTE_ADVANTAGE),
        site_section=lambda page: attribute_section(page.site),
        run_section=attribute_run_section,
    )
)
