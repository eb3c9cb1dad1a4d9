"""Audits of earlier rounds' global checkpoints (``audit.rounds`` / ``audit.every``).

Each site audits the requested rounds in the same query as its main audit of the final
model, with the same settings, so the site fits its generator, helper and reference
statistics once. A resumed run asks a site only for the rounds its audit file lacks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from flwr.app import ArrayRecord

from panoramia_fl.audit.panoramia.over_rounds import RoundLeakage, round_leakage
from panoramia_fl.audit.site_results import SiteResults
from panoramia_fl.contracts.checkpoint import load_checkpoint
from panoramia_fl.contracts.run_files import RunLayout
from panoramia_fl.contracts.run_log import read_rounds
from panoramia_fl.contracts.site_audit import SiteAuditFile
from panoramia_fl.contracts.wire import round_arrays
from panoramia_fl.server.run_writer import read_site_audit, sites_needing_audit

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SiteAuditPlan:
    """What one site is asked: the main audit or not, and which earlier rounds."""

    site: int
    main: bool
    rounds: tuple[int, ...]


def plan_audits(
    layout: RunLayout, sites: list[int], model_round: int, rounds: tuple[int, ...]
) -> list[SiteAuditPlan]:
    """Per site, what is still missing: a site without a current main audit is asked for
    it and for every earlier round in ``rounds``; one with it, for the rounds its file
    lacks (the final round's line comes from the main audit, never a second audit)."""
    earlier = tuple(sorted(r for r in set(rounds) if r != model_round))
    needs_main = set(sites_needing_audit(layout, sites, model_round))
    plans = []
    for site in sites:
        if site in needs_main:
            plans.append(SiteAuditPlan(site, True, earlier))
            continue
        if not rounds:
            continue
        done = read_site_audit(layout, site)
        assert done is not None  # a current, ok main audit
        missing = tuple(r for r in earlier if r not in done.results.audited_rounds())
        if missing:
            plans.append(SiteAuditPlan(site, False, missing))
    return plans


def round_weights(layout: RunLayout, rounds: tuple[int, ...]) -> dict[str, ArrayRecord]:
    """Each round's checkpoint, under its record name."""
    return {
        round_arrays(r): ArrayRecord(load_checkpoint(layout.round_checkpoint(r)).state_dict)
        for r in rounds
    }


def global_accuracy(layout: RunLayout) -> dict[int, float]:
    """The global model's accuracy per round, from the round log (central evaluation)."""
    return {
        e.round: e.global_accuracy for e in read_rounds(layout) if e.global_accuracy is not None
    }


def with_rounds(
    audit: SiteAuditFile[SiteResults],
    earlier: list[RoundLeakage],
    *,
    before: SiteAuditFile[SiteResults] | None,
    rounds: tuple[int, ...],
    accuracy: dict[int, float],
) -> SiteAuditFile[SiteResults]:
    """``audit`` (the site's new file, or its kept one) with ``by_round``: the lines kept
    from ``before``, the new ``earlier`` ones, and the final round's from the main result;
    each with the round's global accuracy. Unchanged when no round was asked for."""
    result = audit.results.panoramia
    if not rounds or not audit.ok or result is None:
        return audit
    lines: dict[int, RoundLeakage] = {}
    if before is not None and before.ok and before.model_round == audit.model_round:
        lines.update({line.round: line for line in before.results.by_round})
    lines.update({line.round: line for line in earlier})
    if audit.model_round is not None:
        lines[audit.model_round] = round_leakage(result, audit.model_round)
    by_round = [
        lines[r].with_accuracy(accuracy.get(r))
        for r in sorted(lines)
        if r in rounds or r == audit.model_round
    ]
    return replace(audit, results=replace(audit.results, by_round=by_round))
