"""Where one site stands in the consortium, without any other site's number or id."""

from __future__ import annotations

from ..numbers.metrics import EPS_TILDE_TWO_SIDED
from ..schemas.schema import ConsortiumStanding, SiteReport

BANDS = ("the highest third", "the middle third", "the lowest third")
"""A site's band by its rank: coarse, so that no band or statistic of the others' values
(a median or maximum of three sites is another site's own number) is ever shown."""

UNAVAILABLE_ALONE = (
    "Unavailable: this page was rebuilt from this site's own audit file alone, without the "
    "other sites' results."
)


def rank_band(rank: int, n_ranked: int) -> str:
    """The third of the ranking (1 = the most leakage) that ``rank`` falls in."""
    if n_ranked == 1:
        return "the only ranked site"
    # (rank - 1) / (n_ranked - 1): 0 = the most leakage, 1 = the least; cut at 1/3 and 2/3.
    steps, span = 3 * (rank - 1), n_ranked - 1
    return BANDS[0] if steps < span else BANDS[2] if steps > 2 * span else BANDS[1]


def consortium_standing(site_id: int, sites: list[SiteReport]) -> ConsortiumStanding:
    """The site's rank by the two-sided eps_tilde among the ok sites that have one (only
    their two-sided eps_tilde is read): 1 = the largest; and its band (:func:`rank_band`).
    A site ranks after every other site that measured at least as much, so ties share the
    lower rank and its band: a site at 0 (the floor) ranks last whatever the others read,
    and no site learns that another read exactly its value. No other site's value, nor any
    statistic of them, is shown: the consortium report, the operator's, has the full
    table."""
    two_sided = {s.site_id: EPS_TILDE_TWO_SIDED.value(s) for s in sites}
    values = {sid: v for sid, v in two_sided.items() if v is not None}
    own = values.get(site_id)
    if own is None:
        return ConsortiumStanding(
            available=False,
            note="Unavailable: this site has no two-sided eps_tilde to rank (its audit failed, "
            "is missing or predates the two-sided game).",
        )
    ranked = list(values.values())
    rank = sum(v >= own for v in ranked)
    return ConsortiumStanding(
        available=True,
        note="Only your rank and band are shown: no other site's number or id, nor the "
        "consortium's median or maximum (with few sites they are other sites' own numbers).",
        rank=rank,
        n_ranked=len(ranked),
        band=rank_band(rank, len(ranked)),
    )


def standing_unavailable() -> ConsortiumStanding:
    """The standing of a page rebuilt from the site's own audit file alone."""
    return ConsortiumStanding(available=False, note=UNAVAILABLE_ALONE)
