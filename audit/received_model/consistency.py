"""Consistency: every site of a round received the same weights.

The protocol (no site waits for a later one, so sites that train one after another cannot
deadlock): the server first *announces* the round to each selected site (the digest of the
model it will send, and the round's sites); each site publishes that announcement as its
:class:`BulletinEntry` on a bulletin only sites write. Then the server sends ``train``, and a
site compares the digest of the model it got against every entry of the round. A server that
announces different digests, skips a site's announcement, names a different set of sites to
different sites, or sends weights other than the ones announced is seen by every site whose
model it changed (and, when the announcements differ, by every site of the round).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from panoramia_fl.audit.received_model.thresholds import THRESHOLDS
from panoramia_fl.contracts.model_flags import CheckOutcome


@dataclass(frozen=True)
class BulletinEntry:
    """What one site published for one round: the announcement it received."""

    site_id: int
    server_round: int
    digest: str
    sites: tuple[int, ...]
    """The round's sites as the server announced them to this site."""


def consistency(
    *,
    site_id: int,
    server_round: int,
    received: str,
    entries: Sequence[BulletinEntry],
    min_sites: int = 1,
) -> CheckOutcome:
    """The consistency check of the model (digest ``received``) that ``site_id`` got to train
    in ``server_round``, against the round's bulletin ``entries``.

    The statistic counts the problems found (threshold 0): the site's own announcement
    missing, a named site without an entry, an entry whose digest is not ``received``, an
    entry naming other sites, fewer sites named than ``min_sites`` (the agreed number per
    round: a server cannot give a site a round of its own).
    """
    entries = [e for e in entries if e.server_round == server_round]
    own = next((e for e in entries if e.site_id == site_id), None)
    problems: list[str] = []
    if own is None:
        problems.append(f"no announcement of round {server_round} reached this site")
        named: tuple[int, ...] = ()
    else:
        named = own.sites
        if site_id not in named:
            problems.append("the announcement does not name this site")
        if len(named) < min_sites:
            problems.append(f"{len(named)} sites named, fewer than the agreed {min_sites}")
    published = {e.site_id for e in entries}
    problems += [f"site {s} published no announcement" for s in sorted(set(named) - published)]
    for entry in sorted(entries, key=lambda e: e.site_id):
        if entry.digest != received:
            problems.append(
                f"site {entry.site_id} was announced {entry.digest[:12]}, this site got "
                f"{received[:12]}"
            )
        if own is not None and entry.sites != own.sites:
            problems.append(f"site {entry.site_id} was told of other sites {list(entry.sites)}")
    threshold, honest = THRESHOLDS["consistency"]
    shown = "; ".join(problems[:4]) + (f"; {len(problems) - 4} more" if len(problems) > 4 else "")
    return CheckOutcome(
        check="consistency",
        statistic=float(len(problems)),
        threshold=threshold,
        honest_range=honest,
        detail=shown,
    )
