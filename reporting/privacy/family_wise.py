"""The consortium's reading of its sites' failed statistical conformance checks.

Each site's statistical checks of its DP-SGD
(:data:`audit.conformance.checks.STATISTICAL_CHECKS`) hold together at the site's own
``beta``: across many sites, one flag among all their checks is expected by chance. A run's
or a sweep's banner therefore also reads each such flag family-wise: Holm's step-down
correction at ``beta`` over every statistical check that ran across its sites. Exact checks
and measured bounds are not read here (they are no chance event); a site's own page reads
its flags at its own level.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from panoramia_fl.audit.conformance.checks import ConformanceCheck

from ..schemas.schema import SiteReport


@dataclass(frozen=True)
class FamilyWise:
    """The family-wise reading of a set of statistical checks."""

    checks: int
    """How many statistical checks ran."""
    chance: float
    """The probability that honest training raises at least one flag among them."""
    survives: tuple[bool, ...]
    """Per check, in the order given: rejected by Holm's correction at ``beta``."""


def family_wise(p_values: Sequence[float], levels: Sequence[float], *, beta: float) -> FamilyWise:
    """Read statistical checks together: the chance of at least one flag, and Holm.

    Parameters
    ----------
    p_values : sequence of float
        Each check's p-value (NaN: the test gave none; read as 0, the flag then survives,
        as an unreadable test proves nothing honest).
    levels : sequence of float
        Each check's own level (its share of its site's ``beta``), the same length.
    beta : float
        The family-wise level of the correction.

    Returns
    -------
    FamilyWise
        ``chance`` is ``1 - prod(1 - level_i)`` (independent honest checks each flag with
        probability at most their level); ``survives[i]`` is check ``i`` rejected by Holm's
        step-down procedure over all the checks at ``beta``.
    """
    p = np.nan_to_num(np.asarray(p_values, dtype=float), nan=0.0)
    level = np.asarray(levels, dtype=float)
    n = len(p)
    order = np.argsort(p, kind="stable")
    # Holm: the k-th smallest p-value (from 0) must lie below beta / (n - k) (below, as a
    # site's check fails below its level); every flag before the first that does not is
    # rejected.
    below = p[order] < beta / (n - np.arange(n))
    rejected = np.logical_and.accumulate(below)
    survives = np.zeros(n, dtype=bool)
    survives[order] = rejected
    chance = float(1.0 - np.prod(1.0 - level))
    return FamilyWise(checks=n, chance=chance, survives=tuple(bool(s) for s in survives))


@dataclass(frozen=True)
class StatisticalFlag:
    """A failed statistical conformance check of one site, read across the consortium."""

    where: str
    """The site, as the banner names it (``site 2``; in a sweep, with its point)."""
    check: ConformanceCheck
    survives: bool


@dataclass(frozen=True)
class ConsortiumReading:
    """Every statistical conformance check across a run's (or a sweep's) sites."""

    sites: int
    """The sites that ran at least one statistical check."""
    beta: float
    """The level of the correction: the sites' audit beta (the smallest, if they differ)."""
    reading: FamilyWise
    flags: tuple[StatisticalFlag, ...]


def consortium_reading(sites: Sequence[tuple[str, SiteReport]]) -> ConsortiumReading | None:
    """The family-wise reading of the named sites' statistical checks; None when none of
    them failed (nothing to read)."""
    entries: list[tuple[str, ConformanceCheck]] = []
    betas: list[float] = []
    for where, site in sites:
        canaries = site.results.gradient_canaries
        result = None if canaries is None else canaries.conformance
        tested = [] if result is None else [c for c in result.checks if c.level is not None]
        if result is not None and tested:
            betas.append(result.beta)
            entries.extend((where, c) for c in tested)
    if not any(not check.passed for _, check in entries):
        return None
    beta = min(betas)
    reading = family_wise(
        [np.nan if c.p_value is None else c.p_value for _, c in entries],
        [c.level for _, c in entries if c.level is not None],
        beta=beta,
    )
    flags = tuple(
        StatisticalFlag(where, check, survives)
        for (where, check), survives in zip(entries, reading.survives, strict=True)
        if not check.passed
    )
    return ConsortiumReading(sites=len(betas), beta=beta, reading=reading, flags=flags)
