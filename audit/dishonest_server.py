"""What a dishonest server rebuilt of one site's records in one round, as the site scored it
against its own records: summary numbers only (:class:`DishonestServerResult`), what leaves
the site. The attacks themselves are :mod:`audit.adversary`'s."""

from __future__ import annotations

from dataclasses import dataclass

from contracts.dishonest_server import AttackName, CraftName, ServerHeld

CHECKS_NOT_RUN = "checks not run"
""":attr:`DishonestServerResult.site_checks` when the site checked nothing of the model it
received before training."""


@dataclass(frozen=True)
class DishonestServerResult:
    """One round in which the run's dishonest server (``fl.adversary``) attacked the site."""

    round: int
    attack: AttackName
    decoded: CraftName | None
    """The crafted model the server decoded records from; None: the site received the real
    model (``inconsistent`` alone: the server's attacks are then the audits of the update it
    held, ``updates`` and ``inversion``)."""
    server_held: ServerHeld
    """``update``: the site's own update; ``sum``: the round's sum (secure aggregation),
    which ``inconsistent`` makes the site's update."""
    measure: str
    """``fields`` (tabular: every field within the tolerance) or ``ssim`` (images)."""
    n_records: int
    """The site's records the round's update came from (the batch under FedSGD)."""
    n_returned: int
    """Rows the server's attack returned."""
    records_rebuilt: int | None
    """Of the ``n_records``, those some returned row rebuilds; None when nothing was decoded."""
    share_rebuilt: float | None
    baseline_share_rebuilt: float | None
    """The same attack's share on an update from public records, scored against the same
    records of the site (chance)."""
    share_rebuilt_loose: float | None = None
    """The looser reading (images: SSIM at least 0.6; rows: every one-hot field exact,
    numeric ones free); None when nothing was decoded."""
    site_checks: str = CHECKS_NOT_RUN
    """What the site's checks of the model it received, before training, said of this
    round (:data:`CHECKS_NOT_RUN` without them)."""

    @property
    def gap(self) -> float | None:
        """The share rebuilt above its baseline."""
        if self.share_rebuilt is None or self.baseline_share_rebuilt is None:
            return None
        return self.share_rebuilt - self.baseline_share_rebuilt
