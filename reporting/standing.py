"""Where one site stands in the consortium, without any other site's number or id."""

from __future__ import annotations

import statistics

from .aggregate import two_sided_mean
from .schema import ConsortiumStanding, SiteReport

MIN_SITES_FOR_STATISTICS = 3
"""Ranked sites needed before the median and max are shown. With two, the median and the
site's own value give the other site's value away exactly."""

UNAVAILABLE_ALONE = (
    "Unavailable: this page was rebuilt from this site's own audit file alone, without the "
    "other sites' results."
)


def consortium_standing(site_id: int, sites: list[SiteReport]) -> ConsortiumStanding:
    """The site's rank by the two-sided eps_tilde among the ok sites that have one (only
    their two-sided eps_tilde is read): 1 = the largest, ties share the better rank."""
    two_sided = {s.site_id: two_sided_mean(s) for s in sites}
    values = {sid: v for sid, v in two_sided.items() if v is not None}
    own = values.get(site_id)
    if own is None:
        return ConsortiumStanding(
            available=False,
            note="Unavailable: this site has no two-sided eps_tilde to rank (its audit failed, "
            "is missing or predates the two-sided game).",
        )
    ranked = list(values.values())
    rank = 1 + sum(v > own for v in ranked)
    if len(ranked) < MIN_SITES_FOR_STATISTICS:
        return ConsortiumStanding(
            available=True,
            note=f"The consortium's median and maximum are withheld: with {len(ranked)} "
            f"ranked site{'s' * (len(ranked) != 1)} they would reveal another site's own "
            f"number (shown from {MIN_SITES_FOR_STATISTICS} sites on).",
            rank=rank,
            n_ranked=len(ranked),
        )
    return ConsortiumStanding(
        available=True,
        note="Consortium statistics over the sites with a two-sided eps_tilde; no other "
        "site's own number or id is shown.",
        rank=rank,
        n_ranked=len(ranked),
        median_eps_tilde_two_sided=float(statistics.median(ranked)),
        max_eps_tilde_two_sided=max(ranked),
    )


def standing_unavailable() -> ConsortiumStanding:
    """The standing of a page rebuilt from the site's own audit file alone."""
    return ConsortiumStanding(available=False, note=UNAVAILABLE_ALONE)
