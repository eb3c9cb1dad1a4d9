"""Audits of earlier rounds' global checkpoints (``audit.rounds`` / ``audit.every``).

Each site audits the requested rounds in the same query as its main audit of the final
model, with the same settings, so the site fits its generator, helper and reference
statistics once. A resumed run asks a site only for the rounds its audit file lacks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from flwr.app import ArrayRecord

from audit.panoramia.over_rounds import RoundLeakage, round_leakage
from audit.result import AuditResult
from contracts.checkpoint import load_checkpoint
from contracts.run_files import RunLayout, SiteAuditFile
from contracts.run_log import read_rounds
from contracts.wire import round_arrays
from server.run_log import read_site_audit, sites_needing_audit

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
        missing = tuple(r for r in earlier if r not in done.audited_rounds())
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
    audit: SiteAuditFile,
    earlier: dict[str, object] | None,
    *,
    before: SiteAuditFile | None,
    rounds: tuple[int, ...],
    accuracy: dict[int, float],
) -> SiteAuditFile:
    """``audit`` (the site's new file, or its kept one) with ``by_round``: the lines kept
    from ``before``, the new ``earlier`` ones, and the final round's from the main result;
    each with the round's global accuracy. Unchanged when no round was asked for."""
    if not rounds or not audit.ok or audit.result is None:
        return audit
    lines: dict[int, RoundLeakage] = {}
    if before is not None and before.ok and before.model_round == audit.model_round:
        lines.update({int(e["round"]): RoundLeakage.from_dict(e) for e in before.by_round or []})
    for key, entry in (earlier or {}).items():
        if isinstance(entry, dict):
            line = RoundLeakage.from_dict(entry)
            if line.round != int(key):
                raise ValueError(f"by_round entry {key!r} says round {line.round}")
            lines[line.round] = line
    if audit.model_round is not None:
        final = AuditResult.from_dict(audit.result)
        lines[audit.model_round] = round_leakage(final, audit.model_round)
    by_round = [
        lines[r].with_accuracy(accuracy.get(r)).to_dict()
        for r in sorted(lines)
        if r in rounds or r == audit.model_round
    ]
    return replace(audit, by_round=by_round)
